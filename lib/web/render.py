"""Text that reaches st.markdown: Streamlit escapes HTML already (we never pass unsafe_allow_html);
this also turns Markdown images into plain links, so neither a user's paste nor a model's answer can make
the browser fetch a remote URL on display (a classic way to leak chat content through an image request)."""
from __future__ import annotations

import re

_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)]*)\)")


def safe_markdown(text: str) -> str:
    return _IMAGE.sub(lambda m: f"[image: {m.group(1) or 'link'}]({m.group(2)})", text)


_MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>:$])")


def plain_label(text: str) -> str:
    """Text shown literally in a widget label (labels render Markdown): every special character escaped."""
    return _MARKDOWN_SPECIALS.sub(r"\\\1", text)
