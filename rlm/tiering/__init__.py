"""Tiering: copying rolled segments to the remote tier and deleting them from it.

The copier (:mod:`~rlm.tiering.copier`, planned by :mod:`~rlm.tiering.copy_plan`, each segment
checked and turned into its row and index object by :mod:`~rlm.tiering.prepare`), retention
(:mod:`~rlm.tiering.retention`), the deletion steps both share (:mod:`~rlm.tiering.deletion`),
the copy leases (:mod:`~rlm.tiering.leases`) and what operators see of it all
(:mod:`~rlm.tiering.overview`).
"""
