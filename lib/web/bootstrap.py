"""The start every page shares: page settings, style, services, the signed-in user (or a sign-in screen)."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from lib.services import Services
from lib.web import ui
from lib.web.identity import Identity


@dataclass(frozen=True)
class PageStart:
    svc: Services
    me: Identity


def start_page(title: str | None = None) -> PageStart:
    """Call first on every page: a configuration error or a missing sign-in stops the page here, explained."""
    st.set_page_config(page_title=f"{title} · Team Chat" if title else "Team Chat", page_icon="💬", layout="wide")
    ui.apply_style()
    svc = ui.services()
    me = ui.current_identity(svc.settings)
    if svc.limits is not None:  # group spend limits follow the verified identity's groups (docs/limits.md)
        svc.limits.identify(me.user_id, me.groups)
    return PageStart(svc, me)
