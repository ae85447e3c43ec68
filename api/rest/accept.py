"""The ``Accept`` header, read as HTTP defines it (RFC 9110, section 12.5.1).

Media ranges are case-insensitive and each has a weight: ``q`` from 0 to 1, 1 when not given;
``q=0`` means "not acceptable". A media type's weight is the one of the most specific range that
matches it (``type/subtype`` over ``type/*`` over ``*/*``). Without the header anything is
acceptable. A malformed weight counts as 1: an odd header gets an answer, never an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ANY = "*/*"


@dataclass(frozen=True)
class Accept:
    """The weights an ``Accept`` header gives, by media range (lower case)."""

    weights: dict[str, float]

    @classmethod
    def parse(cls, header: str | None) -> Accept:
        if header is None or not header.strip():
            return cls({ANY: 1.0})
        weights: dict[str, float] = {}
        for part in header.split(","):
            media, *params = (p.strip() for p in part.split(";"))
            media = media.lower()
            if not media:
                continue
            weight = 1.0
            for param in params:
                key, _, value = param.partition("=")
                if key.strip().lower() == "q":
                    weight = _weight(value.strip())
            # A range named twice: its highest weight.
            weights[media] = max(weight, weights.get(media, 0.0))
        return cls(weights)

    def explicit(self, media: str) -> float:
        """The weight of ``media`` when the header names it, exactly; 0 when it does not."""
        return self.weights.get(media, 0.0)

    def weight(self, media: str) -> float:
        """The weight of ``media``: its own range's, else its type's ``type/*``, else ``*/*``'s."""
        for candidate in (media, media.partition("/")[0] + "/*", ANY):
            if candidate in self.weights:
                return self.weights[candidate]
        return 0.0

    def best(self, offered: Sequence[str]) -> str | None:
        """The media type of ``offered`` with the highest weight above 0 (ties: the first of
        ``offered``), or None when none is acceptable."""
        chosen, top = None, 0.0
        for media in offered:
            weight = self.weight(media)
            if weight > top:
                chosen, top = media, weight
        return chosen


def _weight(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        return 1.0
    return value if 0.0 <= value <= 1.0 else 1.0
