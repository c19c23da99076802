"""A fetched body turned into text a model reads: HTML through trafilatura (main-content
extraction: navigation, scripts and boilerplate dropped; its whole-page text when it finds no
main content), other text types decoded as they are. CPU-bound: callers run `readable_text` in
a worker thread, never on an event loop."""

from __future__ import annotations

import re
from dataclasses import dataclass

import trafilatura

__all__ = ["HTML_TYPES", "TEXT_TYPES", "Readable", "readable_text"]

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
# text a model can read as it is; anything else (images, archives, PDFs) is refused by type
TEXT_TYPES = frozenset(
    {"application/json", "application/ld+json", "application/xml", "application/rss+xml", "application/atom+xml"}
)
# C0 controls except tab and newline, and DEL: never part of readable text, and each would be
# escaped to six bytes in a JSON result
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
BLANK_LINES = re.compile(r"\n{3,}")


@dataclass(frozen=True, slots=True)
class Readable:
    text: str
    title: str | None


def _decode(body: bytes, charset: str | None) -> str:
    if charset:
        try:
            return body.decode(charset, errors="replace")
        except LookupError:
            pass  # an unknown charset name: fall back to UTF-8
    return body.decode("utf-8", errors="replace")


def readable_text(body: bytes, *, media_type: str, charset: str | None) -> Readable:
    """The readable text of a body of `media_type` (HTML is extracted; other text decoded)."""
    if media_type in HTML_TYPES:
        html: str | bytes = _decode(body, charset) if charset else body  # trafilatura detects the rest
        document = trafilatura.bare_extraction(
            html,
            output_format="python",
            favor_recall=True,
            include_comments=False,
            include_tables=True,
            include_images=False,
            with_metadata=True,
            deduplicate=False,
        )
        text = getattr(document, "text", None) or ""
        title = getattr(document, "title", None) or None
        if not text.strip():
            text = trafilatura.html2txt(html) or ""
    else:
        text, title = _decode(body, charset), None
    text = BLANK_LINES.sub("\n\n", CONTROL.sub("", text)).strip()
    return Readable(text=text, title=CONTROL.sub("", title)[:500] if title else None)
