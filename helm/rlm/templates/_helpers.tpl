{{/*
Names and labels, as `helm create` writes them.
*/}}
{{- define "rlm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rlm.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "rlm.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rlm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rlm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "rlm.labels" -}}
helm.sh/chart: {{ include "rlm.chart" . }}
{{ include "rlm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* metadata.annotations of every object, when there are any. */}}
{{- define "rlm.annotations" -}}
{{- $all := merge (dict) (.extra | default dict) .root.Values.commonAnnotations }}
{{- with $all -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "rlm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rlm.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "rlm.secretName" -}}
{{- default (include "rlm.fullname" .) .Values.existingSecret }}
{{- end }}

{{- define "rlm.image" -}}
{{- $repository := .Values.image.repository }}
{{- if .Values.image.registry }}
{{- $repository = printf "%s/%s" .Values.image.registry .Values.image.repository }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The image of the pipeline jobs: the image's spark target. */}}
{{- define "rlm.pipelineImage" -}}
{{- $repository := default .Values.image.repository .Values.pipelines.image.repository }}
{{- if .Values.image.registry }}
{{- $repository = printf "%s/%s" .Values.image.registry $repository }}
{{- end }}
{{- printf "%s:%s" $repository (default (printf "%s-spark" (default .Chart.AppVersion .Values.image.tag)) .Values.pipelines.image.tag) }}
{{- end }}

{{/* Where the rlm container finds its files. */}}
{{- define "rlm.configDir" -}}/etc/rlm{{- end }}
{{- define "rlm.secretsDir" -}}/etc/rlm/secrets{{- end }}
{{- define "rlm.tlsDir" -}}/etc/rlm/tls{{- end }}
{{- define "rlm.cacheDir" -}}/var/cache/rlm{{- end }}

{{/*
Stop with one message naming every required value that is missing or inconsistent.
*/}}
{{- define "rlm.validateValues" -}}
{{- $problems := list }}
{{- if not .Values.config.remoteUrl }}
{{- $problems = append $problems "config.remoteUrl: the remote tier (s3://bucket/prefix) is required" }}
{{- end }}
{{- if and (not .Values.existingSecret) (not .Values.secrets.metadataUrl) }}
{{- $problems = append $problems "secrets.metadataUrl (or existingSecret): the metadata store URL is required" }}
{{- end }}
{{- if and .Values.auth.enabled (not .Values.existingSecret) (not .Values.secrets.readToken) }}
{{- $problems = append $problems "secrets.readToken (or existingSecret): an API token is required while auth.enabled" }}
{{- end }}
{{- if and (not .Values.existingSecret) (ne (not .Values.secrets.awsAccessKeyId) (not .Values.secrets.awsSecretAccessKey)) }}
{{- $problems = append $problems "secrets.awsAccessKeyId and secrets.awsSecretAccessKey: give both (static S3 keys) or neither (the AWS credential chain, e.g. IAM roles for service accounts)" }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) }}
{{- $problems = append $problems "tls.existingSecret: a kubernetes.io/tls Secret is required with tls.enabled" }}
{{- end }}
{{- $sm := .Values.metrics.serviceMonitor }}
{{- if and $sm.enabled .Values.auth.enabled $sm.namespace (ne $sm.namespace .Release.Namespace) (not $sm.tokenSecretName) }}
{{- $problems = append $problems (printf "metrics.serviceMonitor.namespace: the Prometheus Operator reads the scrape token's Secret from the ServiceMonitor's namespace (%s), where the release's Secret is not: leave the namespace empty (the release's, %s), or create a Secret in %s holding the read token under the key %s and name it in metrics.serviceMonitor.tokenSecretName" $sm.namespace .Release.Namespace $sm.namespace .Values.secretKeys.metricsToken) }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") (not .Values.config.logDirs) }}
{{- $problems = append $problems "config.logDirs: the sidecar mode needs the broker's log directories" }}
{{- end }}
{{- /* rlm serves nothing, probes included, while it waits for meta.properties. */}}
{{- if and (eq .Values.mode "sidecar") (kindIs "invalid" .Values.config.brokerId) }}
{{- $first := "" }}
{{- if .Values.startupProbe.enabled }}
{{- $first = "startupProbe" }}
{{- else if .Values.livenessProbe.enabled }}
{{- $first = "livenessProbe" }}
{{- end }}
{{- if $first }}
{{- $probe := index .Values $first }}
{{- $window := add (int $probe.initialDelaySeconds) (mul (int $probe.periodSeconds) (int $probe.failureThreshold)) }}
{{- if ge (int .Values.sidecar.waitForBrokerIdSeconds) (int $window) }}
{{- $problems = append $problems (printf "sidecar.waitForBrokerIdSeconds: %d s is not below the %d s the %s allows (initialDelaySeconds + periodSeconds × failureThreshold): the kubelet would kill rlm while it waits for the broker's meta.properties; shorten the wait or widen the %s" (int .Values.sidecar.waitForBrokerIdSeconds) (int $window) $first $first) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Helm reads values as JSON numbers (float64): an integer beyond 2^53 arrives rounded. */}}
{{- $numbers := dict "indexCache.maxBytes" .Values.indexCache.maxBytes }}
{{- range $key, $value := .Values.config.settings }}
{{- $_ := set $numbers (printf "config.settings.%s" $key) $value }}
{{- end }}
{{- range $topic, $settings := .Values.config.topics }}
{{- range $key, $value := $settings }}
{{- $_ := set $numbers (printf "config.topics.%s.%s" $topic $key) $value }}
{{- end }}
{{- end }}
{{- range $key, $value := $numbers }}
{{- if and (kindIs "float64" $value) (or (ge $value 9007199254740992.0) (le $value -9007199254740992.0)) }}
{{- $problems = append $problems (printf "%s: %.0f is beyond 2^53, where Helm's numbers (float64) lose digits and rlm would get another value; write it quoted (a string rlm reads exactly), e.g. \"9223372036854775807\"" $key $value) }}
{{- end }}
{{- end }}
{{- if $problems }}
{{- fail (printf "\n\nrlm: the values are incomplete:\n  - %s\n" (join "\n  - " $problems)) }}
{{- end }}
{{- end }}

{{/*
The settings file (rlm.yaml). Secrets never go here: they are files of the Secret.
*/}}
{{- define "rlm.settingsFile" -}}
{{- $settings := dict
  "remote.url" .Values.config.remoteUrl
  "http.port" .Values.containerPorts.http
  "grpc.port" .Values.containerPorts.grpc
  "auth.enabled" .Values.auth.enabled
  "remote.log.index.cache.dir" (printf "%s/index" (include "rlm.cacheDir" .))
  "remote.log.index.file.cache.total.size.bytes" (int64 .Values.indexCache.maxBytes)
}}
{{- if .Values.config.s3EndpointUrl }}
{{- $_ := set $settings "s3.endpoint.url" .Values.config.s3EndpointUrl }}
{{- end }}
{{- if .Values.tls.enabled }}
{{- $_ := set $settings "tls.cert.file" (printf "%s/tls.crt" (include "rlm.tlsDir" .)) }}
{{- $_ := set $settings "tls.key.file" (printf "%s/tls.key" (include "rlm.tlsDir" .)) }}
{{- end }}
{{- if eq .Values.mode "sidecar" }}
{{- $_ := set $settings "log.dirs" .Values.config.logDirs }}
{{- if not (kindIs "invalid" .Values.config.brokerId) }}
{{- $_ := set $settings "broker.id" (int64 .Values.config.brokerId) }}
{{- end }}
{{- end }}
{{- $settings = merge $settings .Values.config.settings }}
{{- if .Values.config.topics }}
{{- $_ := set $settings "topics" .Values.config.topics }}
{{- end }}
{{- toYaml $settings }}
{{- end }}

{{/* Probes: an httpGet on one of rlm's routes. */}}
{{- define "rlm.probe" -}}
{{- $probe := omit .probe "enabled" -}}
httpGet:
  path: {{ .path }}
  port: rlm-http
  scheme: {{ ternary "HTTPS" "HTTP" .root.Values.tls.enabled }}
{{ toYaml $probe }}
{{- end }}

{{/*
The rlm container, shared by the standalone Deployment and the broker pods (sidecar mode).
Include it in a Kafka chart's sidecars with its volumes from "rlm.sidecarVolumes".
*/}}
{{- define "rlm.container" -}}
{{- $sidecar := eq .Values.mode "sidecar" -}}
- name: rlm
  image: {{ include "rlm.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
    - serve
    - --log-level
    - {{ .Values.logLevel }}
    {{- if and $sidecar (kindIs "invalid" .Values.config.brokerId) }}
    - --wait-for-broker-id
    - {{ .Values.sidecar.waitForBrokerIdSeconds | quote }}
    {{- end }}
  env:
    - name: RLM_CONFIG
      value: {{ include "rlm.configDir" . }}/rlm.yaml
    - name: RLM_METADATA_URL_FILE
      value: {{ include "rlm.secretsDir" . }}/metadata-url
    {{- if .Values.auth.enabled }}
    - name: RLM_AUTH_TOKENS_FILE
      value: {{ include "rlm.secretsDir" . }}/auth-tokens
    {{- end }}
    - name: AWS_ACCESS_KEY_ID
      valueFrom:
        secretKeyRef:
          name: {{ include "rlm.secretName" . }}
          key: {{ .Values.secretKeys.awsAccessKeyId }}
          optional: true
    - name: AWS_SECRET_ACCESS_KEY
      valueFrom:
        secretKeyRef:
          name: {{ include "rlm.secretName" . }}
          key: {{ .Values.secretKeys.awsSecretAccessKey }}
          optional: true
    {{- with .Values.extraEnvVars }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: rlm-http
      containerPort: {{ .Values.containerPorts.http }}
      protocol: TCP
    - name: rlm-grpc
      containerPort: {{ .Values.containerPorts.grpc }}
      protocol: TCP
  {{- if .Values.startupProbe.enabled }}
  startupProbe:
    {{- include "rlm.probe" (dict "root" . "probe" .Values.startupProbe "path" "/healthz") | nindent 4 }}
  {{- end }}
  {{- if .Values.livenessProbe.enabled }}
  livenessProbe:
    {{- include "rlm.probe" (dict "root" . "probe" .Values.livenessProbe "path" "/healthz") | nindent 4 }}
  {{- end }}
  {{- if and .Values.readinessProbe.enabled (or (not $sidecar) .Values.sidecar.readinessProbe) }}
  readinessProbe:
    {{- include "rlm.probe" (dict "root" . "probe" .Values.readinessProbe "path" "/readyz") | nindent 4 }}
  {{- end }}
  {{- with .Values.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if .Values.containerSecurityContext.enabled }}
  securityContext:
    {{- omit .Values.containerSecurityContext "enabled" | toYaml | nindent 4 }}
  {{- end }}
  volumeMounts:
    {{- if $sidecar }}
    - name: {{ .Values.sidecar.dataVolume }}
      mountPath: {{ .Values.sidecar.dataMountPath }}
      readOnly: true
    {{- end }}
    - name: rlm-config
      mountPath: {{ include "rlm.configDir" . }}/rlm.yaml
      subPath: rlm.yaml
      readOnly: true
    - name: rlm-secrets
      mountPath: {{ include "rlm.secretsDir" . }}
      readOnly: true
    {{- if .Values.tls.enabled }}
    - name: rlm-tls
      mountPath: {{ include "rlm.tlsDir" . }}
      readOnly: true
    {{- end }}
    - name: rlm-cache
      mountPath: {{ include "rlm.cacheDir" . }}
    - name: rlm-tmp
      mountPath: /tmp
{{- end }}

{{/* The volumes the rlm container mounts (the broker's data volume is the Kafka chart's). */}}
{{- define "rlm.volumes" -}}
{{- /* In a broker pod, an object of this release that is missing (uninstalled, not yet applied) must
stop the rlm container only, never the pod and its broker. */}}
{{- $sidecar := eq .Values.mode "sidecar" -}}
- name: rlm-config
  configMap:
    name: {{ include "rlm.fullname" . }}
    {{- if $sidecar }}
    optional: true
    {{- end }}
- name: rlm-secrets
  secret:
    secretName: {{ include "rlm.secretName" . }}
    {{- if $sidecar }}
    optional: true
    {{- end }}
    items:
      - key: {{ .Values.secretKeys.metadataUrl }}
        path: metadata-url
      {{- if .Values.auth.enabled }}
      - key: {{ .Values.secretKeys.authTokens }}
        path: auth-tokens
      {{- end }}
{{- if .Values.tls.enabled }}
- name: rlm-tls
  secret:
    secretName: {{ .Values.tls.existingSecret }}
    {{- if $sidecar }}
    optional: true
    {{- end }}
{{- end }}
- name: rlm-cache
  emptyDir:
    sizeLimit: {{ .Values.indexCache.sizeLimit }}
- name: rlm-tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- end }}

{{/* The sidecar and its volumes for a Kafka chart's values (NOTES.txt prints them), from this
chart's values: call them with this chart's context. */}}
{{- define "rlm.sidecarContainer" -}}
{{- include "rlm.container" . }}
{{- end }}

{{- define "rlm.sidecarVolumes" -}}
{{- include "rlm.volumes" . }}
{{- end }}

{{/* An IntOrString value: a number as is, a percentage quoted. */}}
{{- define "rlm.intOrString" -}}
{{- if kindIs "string" . }}{{ . | quote }}{{ else }}{{ . }}{{ end }}
{{- end }}

{{/* The standalone pods: the selector of their Deployment, Service, PodDisruptionBudget, policy. */}}
{{- define "rlm.queryTierSelectorLabels" -}}
{{ include "rlm.selectorLabels" . }}
app.kubernetes.io/component: query-tier
{{- end }}
