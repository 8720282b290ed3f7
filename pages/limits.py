"""Spend limits: admins set USD per UTC day and month for everyone, a group or a user (docs/limits.md).
Thin over lib.web.limits_view; admins only, checked on the server on every run."""

from __future__ import annotations

from lib.web import limits_view, ui
from lib.web.bootstrap import start_page

start = start_page("Spend limits")
ui.sidebar(start.svc, start.me, ui.chat_view(start.me.user_id))
limits_view.admin_page(start.svc, start.me)
