"""DSCP values by number or by name, as EOS and NVUE accept them wherever they take a DSCP.

The names are RFC 2474's class selectors (cs0…cs7 = 8·N), RFC 2597's assured forwarding
classes (afXY = 8·X + 2·Y, X 1–4, Y 1–3), RFC 3246's expedited forwarding (ef = 46) and
`default` (0).
"""

from __future__ import annotations

DSCP_MAX = 63
DSCP_NAMES: dict[str, int] = {
    "default": 0, "ef": 46,
    **{f"cs{n}": 8 * n for n in range(8)},
    **{f"af{x}{y}": 8 * x + 2 * y for x in range(1, 5) for y in range(1, 4)},
}
DSCP_EXPECTED = "a whole number from 0 to 63, or a name: default, ef, cs0…cs7, af11…af43"


def dscp_value(word: str) -> int | None:
    """The DSCP a word names (`26`, `af31`, `CS6`); None when it names none."""
    word = word.lower()
    if word in DSCP_NAMES:
        return DSCP_NAMES[word]
    if word.isdigit() and int(word) <= DSCP_MAX:
        return int(word)
    return None
