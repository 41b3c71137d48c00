"""A .docx (a zip) checked before it is opened: its members, sizes, ratios and XML elements."""

from __future__ import annotations

import io
import zipfile
from typing import Any

from companion.rag.limits import MIB, RATIO_FLOOR, DocumentLimitError, DocumentLimits


def check_archive(data: bytes, name: str, limits: DocumentLimits) -> None:
    """Refuse a zip (a .docx) that would unpack past the limits, before it is parsed.

    The directory's sizes are checked first (members, their sum, each ratio); Python's
    zipfile, which python-docx reads through, never returns more than a member's
    declared size (a member that holds more fails its CRC).  Then the XML parts are
    streamed and their elements counted (start tags, an upper bound), the stream
    stopping at the limit.  A file that is not a zip is left to the reader's own error.
    """
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError):
        return
    with archive:
        members = archive.infolist()
        if len(members) > limits.max_archive_members:
            raise DocumentLimitError(
                f"{name}: the Word document holds {len(members):,} files, more than "
                f"{limits.max_archive_members:,} (max_archive_members); it is damaged or "
                "not a plain document -- save it again from your word processor"
            )
        unpacked = sum(m.file_size for m in members)
        if unpacked > limits.max_unpacked_bytes:
            raise DocumentLimitError(
                f"{name}: the Word document unpacks to {unpacked / MIB:,.0f} MB, more than "
                f"{limits.max_unpacked_bytes / MIB:,.0f} MB (max_unpacked_bytes); split it "
                "or save its text (File > Save As > Plain Text) and upload that"
            )
        for member in members:
            ratio = member.file_size / max(member.compress_size, 1)
            if member.file_size > RATIO_FLOOR and ratio > limits.max_compression_ratio:
                raise DocumentLimitError(
                    f"{name}: a part of the Word document ({member.filename}) expands "
                    f"{ratio:,.0f} times when unpacked, more than "
                    f"{limits.max_compression_ratio:g} (max_compression_ratio): a "
                    "decompression bomb, or a document of nothing but empty paragraphs; "
                    "save its text (File > Save As > Plain Text) and upload that"
                )
        elements = 0
        for member in members:
            if not member.filename.lower().endswith((".xml", ".rels")):
                continue
            try:
                with archive.open(member) as stream:
                    elements += _count_elements(stream, limits.max_xml_elements - elements)
            except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError):
                return  # the reader says what is wrong with the file
            if elements > limits.max_xml_elements:
                raise DocumentLimitError(
                    f"{name}: the Word document has more than {limits.max_xml_elements:,} "
                    "XML elements (max_xml_elements); split it into smaller documents or "
                    "save its text (File > Save As > Plain Text) and upload that"
                )


def _count_elements(stream: Any, limit: int) -> int:
    """Start tags in an XML stream (comments, declarations and end tags not counted),
    read 1 MiB at a time; stops once the count passes ``limit``."""
    count = 0
    carry = b""
    while count <= limit:
        chunk = stream.read(MIB)
        if not chunk:
            break
        buf = carry + chunk
        carry = b"<" if buf.endswith(b"<") else b""  # "</", "<?", "<!" may straddle reads
        if carry:
            buf = buf[:-1]
        count += buf.count(b"<") - buf.count(b"</") - buf.count(b"<?") - buf.count(b"<!")
    return count
