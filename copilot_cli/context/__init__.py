"""Repository context for one request: chunks chosen for the file and cursor, packed into a
token budget exactly, rendered for a template; and a static repository overview.

Names are imported on first use (core/lazy.py)."""

from copilot_cli.core.lazy import exports

_WHERE = {
    "Chosen": "copilot_cli.context.options",
    "ContextOptions": "copilot_cli.context.options",
    "ContextRequest": "copilot_cli.context.requests",
    "ContextResult": "copilot_cli.context.options",
    "ContextSession": "copilot_cli.context.session",
    "FILE_SEP_TOKENS": "copilot_cli.context.render",
    "OverviewOptions": "copilot_cli.context.options",
    "OverviewResult": "copilot_cli.context.options",
    "XML_INTRO": "copilot_cli.context.render",
    "file_sep_token": "copilot_cli.context.render",
    "open_session": "copilot_cli.context.session",
    "render_block": "copilot_cli.context.render",
    "repository_overview": "copilot_cli.context.session",
    "select_context": "copilot_cli.context.session",
    "snippet_ids": "copilot_cli.context.render",
    "snippet_text": "copilot_cli.context.render",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)
