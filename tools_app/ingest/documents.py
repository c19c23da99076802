"""Documents into searchable chunks: text, Markdown, HTML and PDF (pypdf) to plain text, then
chunks of about 1,000 characters cut at headings, paragraphs, lines, sentences or words, with
overlap. Bounded in size, pages, decompressed PDF content and chunk count, and linear in the
text's length (no backtracking regex over whitespace or headings); an unreadable file is a
KnowledgeError naming why. Imports no Django: the knowledge tool stores what this returns, and
tools_app.ingest.worker runs it in a child process with CPU and memory budgets.
"""

from __future__ import annotations

import bisect
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from html.parser import HTMLParser
from pathlib import PurePath
from typing import Any

__all__ = [
    "CHUNK_CHARS",
    "MAX_CHUNKS",
    "MAX_DOCUMENT_BYTES",
    "MEDIA_TYPES",
    "OVERLAP_CHARS",
    "ChunkSpan",
    "KnowledgeError",
    "KnowledgeJobStatus",
    "MAX_PDF_DECODED_BYTES",
    "MAX_PDF_PAGES",
    "ParsedDocument",
    "Progress",
    "chunk_text",
    "extract_text",
    "media_type_of",
    "parse_document",
]

MAX_DOCUMENT_BYTES = 20 * 1024 * 1024  # one file: a manual or a book, not a data dump
MAX_TEXT_CHARS = 10_000_000  # extracted text: a 20 MiB file of plain text, about 12,000 chunks
MAX_CHUNKS = 12_000  # per document, so one file cannot fill the database
MAX_PDF_PAGES = 5_000  # pages read from one PDF; a longer one is refused before any page is read
# Decoded (decompressed) page content read from one PDF: a text PDF carries some 5-20 KB of content
# per page, so 5,000 pages fit; a few KB of Flate can otherwise inflate to gigabytes
MAX_PDF_DECODED_BYTES = 128 * 1024 * 1024
# One decoded stream (a page's content, a form, an image): pypdf's own limit, lowered to ours
MAX_PDF_STREAM_BYTES = 32 * 1024 * 1024
CHUNK_CHARS = 1_000  # a chunk: a passage a model can cite, ten of them fit a context beside the conversation
MIN_CHUNK_CHARS = 250  # a chunk cut early (at a heading or paragraph) still holds this much
OVERLAP_CHARS = 150  # the next chunk repeats up to this much, so a sentence cut at a boundary is found whole
MAX_TITLE_CHARS = 300  # the Document.title column

MEDIA_TYPES = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".pdf": "application/pdf",
}


class KnowledgeError(ValueError):
    """A document that cannot be added; the message says why, for the operator."""


class KnowledgeJobStatus(StrEnum):
    """Where the ingestion of one uploaded document stands."""

    QUEUED = "queued"  # stored and waiting for a worker
    RUNNING = "running"  # a worker process is reading it
    DONE = "done"  # indexed: its document is searchable
    FAILED = "failed"  # not added; the job's error says why


Progress = Callable[[int, str], None]  # (percent done, what is being done), from the parsing process


def _no_progress(percent: int, note: str) -> None:
    """The default Progress: nobody is watching."""


@dataclass(frozen=True, slots=True)
class ChunkSpan:
    position: int  # 0 for the first chunk
    start: int  # character offsets [start, end) in the document's extracted text
    end: int
    text: str
    page: int | None = None  # PDF: the page the chunk starts on (1-based)


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    title: str
    media_type: str
    size: int  # bytes of the file
    text: str
    chunks: tuple[ChunkSpan, ...]


def media_type_of(filename: str, data: bytes = b"") -> str:
    """The media type a file is read as, from its extension (a PDF is also known by its magic)."""
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    media_type = MEDIA_TYPES.get(PurePath(filename).suffix.lower())
    if media_type is None:
        known = ", ".join(sorted(MEDIA_TYPES))
        raise KnowledgeError(f"{filename}: unsupported file type (supported: {known})")
    return media_type


# -- text extraction ------------------------------------------------------------------------------


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise KnowledgeError(f"not UTF-8 text (byte {exc.start})") from None


_HEADING_TAGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCK_TAGS = frozenset(
    "p div section article header footer main aside nav blockquote pre ul ol li table tr dl dt dd figure"
    " figcaption form hr br address details summary".split()
)
_SKIPPED_TAGS = frozenset({"script", "style", "noscript", "template", "svg", "head"})


class _HTMLText(HTMLParser):
    """Visible text of an HTML page: blocks on their own lines, headings as Markdown headings
    (so the chunker cuts at them), script and style dropped."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self.first_heading = ""
        self._skipping = 0
        self._in_title = False
        self._heading: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _SKIPPED_TAGS:
            self._skipping += 1
        elif tag in _HEADING_TAGS:
            self.parts.append("\n\n" + "#" * _HEADING_TAGS[tag] + " ")
            self._heading = []
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n\n" if tag in ("p", "div", "section", "article", "table", "pre") else "\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIPPED_TAGS:
            self._skipping = max(0, self._skipping - 1)
        elif tag in _HEADING_TAGS:
            if self._heading is not None and not self.first_heading:
                self.first_heading = " ".join("".join(self._heading).split())
            self._heading = None
            self.parts.append("\n\n")
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skipping:
            text = re.sub(r"\s+", " ", data)  # linear: a match consumes its whole run of blanks
            self.parts.append(text)
            if self._heading is not None:
                self._heading.append(text)


def _html_text(data: bytes) -> tuple[str, str]:
    parser = _HTMLText()
    try:
        parser.feed(_decode(data))
        parser.close()
    except KnowledgeError:
        raise
    except Exception as exc:  # a hostile page: any parser failure is an unreadable file
        raise KnowledgeError(f"unreadable HTML: {exc}") from None
    text = "".join(parser.parts)
    text = "\n".join(line.strip() for line in text.splitlines())
    return " ".join(parser.title.split()) or parser.first_heading, text


def _markdown_title(text: str) -> str:
    """The first ATX heading's text (`# Title ##`). A line scan: the regex it replaces
    (`^#{1,6}[ \\t]+(.+?)[ \\t#]*$`) backtracked quadratically on a heading line holding a long
    run of spaces before a last word."""
    for line in text.split("\n"):
        hashes = len(line) - len(line.lstrip("#"))
        if 1 <= hashes <= 6 and line[hashes : hashes + 1] in (" ", "\t"):
            title = line[hashes:].strip(" \t").rstrip(" \t#").strip()
            if title:
                return title
    return ""


def _pypdf_limits() -> Any:
    """pypdf's own guards against decompression bombs (its Configuration, set for this context
    only), lowered to ours: one decoded stream at most MAX_PDF_STREAM_BYTES, and no stream may
    declare more bytes than a whole document may have."""
    from pypdf import apply_configuration

    stream = MAX_PDF_STREAM_BYTES
    return apply_configuration(
        maximum_declared_stream_length=MAX_DOCUMENT_BYTES,
        array_based_stream_maximum_output_length=stream,
        jbig2_maximum_output_length=stream,
        lzw_maximum_output_length=stream,
        run_length_maximum_output_length=stream,
        zlib_maximum_output_length=stream,
        brotli_maximum_output_length=stream,
        image_maximum_buffer_size=stream,
    )


def _page_content_bytes(page: Any) -> int:
    """Decoded bytes of a page's content streams (pypdf caches what it decodes for extraction)."""
    contents = page.get_contents()
    return len(contents.get_data()) if contents is not None else 0


def _pdf_text(data: bytes, progress: Progress) -> tuple[str, str, list[int]]:
    """Title, text and the offset where each page's text starts. Refused before any text is
    read: more than MAX_PDF_PAGES pages; while reading: more than MAX_PDF_DECODED_BYTES of
    decoded page content or MAX_TEXT_CHARS of text."""
    from pypdf.errors import LimitReachedError

    try:
        with _pypdf_limits():
            return _read_pdf(data, progress)
    except KnowledgeError:
        raise
    except LimitReachedError as exc:
        raise KnowledgeError(f"decompressed PDF content exceeds a limit: {str(exc)[:200]}") from None
    except MemoryError:
        raise
    except Exception as exc:  # pypdf raises many types on a damaged or hostile file
        raise KnowledgeError(f"unreadable PDF: {type(exc).__name__}: {str(exc)[:200]}") from None


def _read_pdf(data: bytes, progress: Progress) -> tuple[str, str, list[int]]:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted and not reader.decrypt(""):
        raise KnowledgeError("the PDF is encrypted")
    count = len(reader.pages)
    if count > MAX_PDF_PAGES:
        raise KnowledgeError(f"the PDF has {count} pages; at most {MAX_PDF_PAGES} are read")
    metadata = reader.metadata
    title = str(metadata.title or "") if metadata is not None else ""
    texts: list[str] = []
    starts: list[int] = []
    offset = decoded = 0
    for number, page in enumerate(reader.pages, 1):
        decoded += _page_content_bytes(page)
        if decoded > MAX_PDF_DECODED_BYTES:
            raise KnowledgeError(
                f"decompressed PDF content exceeds {MAX_PDF_DECODED_BYTES} bytes (at page {number} of {count})"
            )
        page_text = page.extract_text() or ""
        starts.append(offset)
        texts.append(page_text)
        offset += len(page_text) + 2
        if offset > MAX_TEXT_CHARS:
            raise KnowledgeError(f"document too long: more than {MAX_TEXT_CHARS} characters of text")
        progress(10 + 70 * number // count, f"page {number} of {count}")
    return " ".join(title.split()), "\n\n".join(texts), starts


def extract_text(data: bytes, media_type: str, *, progress: Progress = _no_progress) -> tuple[str, str, list[int]]:
    """(title or "", text, page start offsets ([] unless a PDF)) of a file's bytes."""
    if media_type == "application/pdf":
        return _pdf_text(data, progress)
    if media_type == "text/html":
        title, text = _html_text(data)
        return title, text, []
    if media_type in ("text/plain", "text/markdown"):
        text = _decode(data)
        return (_markdown_title(text) if media_type == "text/markdown" else ""), text, []
    raise KnowledgeError(f"unsupported media type {media_type}")


# -- chunking -------------------------------------------------------------------------------------

# Where a chunk may end, best first: before a heading, at a blank line, at a line end, after a
# sentence, after a word. The chunker takes the latest cut of the best kind in its window.
# Linear: each pattern starts only at one fixed character, its one repetition ([ \t]*) cannot
# cross a newline, and finditer runs over one window of CHUNK_CHARS - MIN_CHUNK_CHARS characters.
_CUTS = (
    re.compile(r"\n(?=[ \t]*#{1,6}[ \t])"),
    re.compile(r"\n[ \t]*\n"),
    re.compile(r"\n"),
    re.compile(r"[.!?;:][\"')\]]?[ \t]"),
    re.compile(r"[ \t]"),
)
_HEADING_CUT = 0


def _normalize(text: str) -> str:
    """Unix newlines, no NULs, no blanks at line ends, at most one empty line in a row. The
    blanks go by a line scan: `re.sub(r"[ \\t]+\\n", ...)`, which it replaces, rescanned a run
    of blanks from each of its characters (quadratic: hours for a few MiB of spaces)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    lines = text.split("\n")
    text = "\n".join([line.rstrip(" \t") for line in lines[:-1]] + lines[-1:])
    # linear: a match starts only at a newline and consumes its whole run
    return re.sub(r"\n{3,}", "\n\n", text)


def _cut(text: str, start: int) -> tuple[int, int]:
    """Where the chunk starting at `start` ends, and the kind of cut (len(_CUTS) for a hard one)."""
    limit = start + CHUNK_CHARS
    for kind, pattern in enumerate(_CUTS):
        last = -1
        for match in pattern.finditer(text, start + MIN_CHUNK_CHARS, limit):
            last = match.end()
        if last > 0:
            return last, kind
    return limit, len(_CUTS)


def _next_start(text: str, end: int, floor: int) -> int:
    """The start of the chunk after one ending at `end`: up to OVERLAP_CHARS back, at a word."""
    at = max(floor, end - OVERLAP_CHARS)
    space = re.compile(r"\s").search(text, at, end)  # one character: linear
    return space.end() if space is not None else end


def _page_of(offset: int, page_starts: list[int]) -> int | None:
    if not page_starts:
        return None
    return max(1, bisect.bisect_right(page_starts, offset))  # a binary search: chunks × pages stays small


def chunk_text(text: str, *, page_starts: list[int] | None = None) -> list[ChunkSpan]:
    """Chunks of at most CHUNK_CHARS characters covering `text`; each after the first repeats the
    end of the one before (up to OVERLAP_CHARS, never across a heading). Offsets index `text`."""
    starts = page_starts or []
    chunks: list[ChunkSpan] = []
    start, length = 0, len(text)
    while start < length:
        if length - start <= CHUNK_CHARS:
            end, kind = length, _HEADING_CUT
        else:
            end, kind = _cut(text, start)
        piece = text[start:end]
        stripped = piece.strip()
        if stripped:
            if len(chunks) >= MAX_CHUNKS:
                raise KnowledgeError(f"document too long: more than {MAX_CHUNKS} chunks")
            left = start + len(piece) - len(piece.lstrip())
            chunks.append(ChunkSpan(len(chunks), left, left + len(stripped), stripped, _page_of(left, starts)))
        if end >= length:
            break
        start = end if kind == _HEADING_CUT else _next_start(text, end, start + 1)
    return chunks


def parse_document(data: bytes, filename: str, *, title: str = "", progress: Progress = _no_progress) -> ParsedDocument:
    """A file's bytes as a document ready to store, or KnowledgeError saying why it cannot be."""
    if len(data) > MAX_DOCUMENT_BYTES:
        raise KnowledgeError(f"file too large: {len(data)} bytes; at most {MAX_DOCUMENT_BYTES} bytes")
    if not data:
        raise KnowledgeError("the file is empty")
    media_type = media_type_of(filename, data)
    progress(5, "reading text")
    found_title, raw, page_starts = extract_text(data, media_type, progress=progress)
    if media_type == "application/pdf":
        text = raw.replace("\x00", " ")  # page offsets index this text: keep its length
    else:
        text = _normalize(raw)
    if len(text) > MAX_TEXT_CHARS:
        raise KnowledgeError(f"document too long: more than {MAX_TEXT_CHARS} characters of text")
    progress(80, "cutting chunks")
    chunks = chunk_text(text, page_starts=page_starts)
    if not chunks:
        hint = " (a scanned PDF needs text recognition first)" if media_type == "application/pdf" else ""
        raise KnowledgeError(f"no text found{hint}")
    name = title.strip() or found_title or PurePath(filename).stem or filename
    return ParsedDocument(name[:MAX_TITLE_CHARS], media_type, len(data), text, tuple(chunks))
