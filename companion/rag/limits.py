"""What reading one uploaded file may cost, and the errors that say a file went past it."""

from __future__ import annotations

from dataclasses import dataclass

from py_core.errors import InvalidParameterError


class DocumentTooLargeError(InvalidParameterError):
    """A file whose extracted text (or chunk count) passes a limit; names the file and limit."""


class DocumentLimitError(DocumentTooLargeError):
    """A file that would cost more than a :class:`DocumentLimits` bound (or the parsing
    process's memory or time) to read; names the file, the limit and what to do."""


MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    """What reading one file may cost besides its text (settings of the same names)."""

    max_unpacked_bytes: int = 100 * MIB  # a .docx: sum of its members' uncompressed sizes
    max_compression_ratio: float = 100.0  # a .docx member, a PDF's pages: unpacked/stored
    max_archive_members: int = 2000  # a .docx: files inside the zip
    max_xml_elements: int = 1_000_000  # a .docx: XML elements over all its parts
    ocr_max_images: int = 100  # distinct images read by OCR per file
    ocr_timeout_s: float = 90.0  # Tesseract time per file

    def __post_init__(self) -> None:
        for name in (
            "max_unpacked_bytes",
            "max_compression_ratio",
            "max_archive_members",
            "max_xml_elements",
            "ocr_max_images",
            "ocr_timeout_s",
        ):
            value = getattr(self, name)
            if not value > 0:
                raise InvalidParameterError(f"{name} must be positive, got {value!r}")


DEFAULT_LIMITS = DocumentLimits()
RATIO_FLOOR = MIB  # members smaller than this may compress as well as they like


def too_large(name: str, limit: int, unit: str = "characters") -> DocumentTooLargeError:
    """The file's text passes ``limit`` characters (or chunks): name both, say what to do."""
    setting = "max_document_chars" if unit == "characters" else "max_document_chunks"
    return DocumentTooLargeError(
        f"{name}: the file has more than {limit:,} {unit} of text, the limit per document "
        f"({setting}); split it into smaller files"
    )
