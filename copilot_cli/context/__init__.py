"""Repository context for one request: chunks chosen for the file and cursor, packed into a
token budget exactly, rendered for a template; and a static repository overview."""

from copilot_cli.context.options import (
    Chosen,
    ContextOptions,
    ContextResult,
    OverviewOptions,
    OverviewResult,
)
from copilot_cli.context.render import (
    FILE_SEP_TOKENS,
    XML_INTRO,
    file_sep_token,
    render_block,
    snippet_ids,
    snippet_text,
)
from copilot_cli.context.requests import ContextRequest
from copilot_cli.context.session import (
    ContextSession,
    open_session,
    repository_overview,
    select_context,
)

__all__ = [
    "FILE_SEP_TOKENS",
    "XML_INTRO",
    "Chosen",
    "ContextOptions",
    "ContextRequest",
    "ContextResult",
    "ContextSession",
    "OverviewOptions",
    "OverviewResult",
    "file_sep_token",
    "open_session",
    "render_block",
    "repository_overview",
    "select_context",
    "snippet_ids",
    "snippet_text",
]
