"""Keyboard shortcuts, installed once per browser tab: they press the page's own buttons and links, nothing else.

    Esc             Stop the answer being written (the Stop button on the page, if there is one)
    Ctrl+Shift+O    New chat (Cmd+Shift+O on a Mac)
    Ctrl+K          Search (Cmd+K)
    Shift+Esc       put the cursor in the question box
Enter sends and Shift+Enter starts a new line: Streamlit's chat input does that itself. On a phone, where the
sidebar covers the page, tapping a chat in it (or New chat) also closes the sidebar, as tapping a page link does
in Streamlit, so the chat picked is what the reader sees. Stop acts on the press of the pointer, not the click
(the streaming page moves under it). The script fetches
nothing and reads nothing the user or the model wrote: it finds elements by the keys and links this app gives
them (the Stop button's `stop-<id>` key, `new-chat`, the chat rows' `open-<id>`, the Search page's link, the
sidebar's own collapse button).
"""

from __future__ import annotations

import streamlit as st

HELP = "Esc stops an answer · Ctrl+Shift+O new chat · Ctrl+K search · Shift+Esc the question box"

_SCRIPT = """<script>(() => {
  if (window.__chatShortcuts) return;
  window.__chatShortcuts = true;
  const click = (selector) => {
    const found = document.querySelector(selector);
    if (!found) return false;
    found.click();
    return true;
  };
  window.addEventListener("keydown", (event) => {
    if (!event.isTrusted) return;
    const mod = event.ctrlKey || event.metaKey, key = event.key.toLowerCase();
    let done = false;
    if (key === "escape" && event.shiftKey) {
      const box = document.querySelector('[data-testid="stChatInput"] textarea');
      if (box) { box.focus(); done = true; }
    } else if (key === "escape" && !mod) {
      done = click('div[class*="st-key-stop-"] button');
    } else if (key === "o" && mod && event.shiftKey) {
      done = click('div[class*="st-key-new-chat"] button');
    } else if (key === "k" && mod && !event.shiftKey) {
      done = click('[data-testid="stSidebar"] a[href="search"], [data-testid="stSidebar"] a[href$="/search"]');
    }
    if (done) { event.preventDefault(); event.stopPropagation(); }
  }, {capture: true});
  // Stop acts on the press: while an answer streams the page redraws and moves under a finger or pointer, and a
  // click needs its press and release on one element (on a phone a tap missed nearly every time). The click that
  // follows the press on the same button is then swallowed, so one tap stops once.
  let pressed = 0;
  const stopButton = (event) => event.target.closest?.('div[class*="st-key-stop-"] button');
  window.addEventListener("pointerdown", (event) => {
    const stop = event.isTrusted && event.button === 0 && stopButton(event);
    if (!stop) return;
    pressed = performance.now();
    stop.click();
  }, {capture: true});
  window.addEventListener("click", (event) => {
    if (event.isTrusted && performance.now() - pressed < 1500 && stopButton(event)) {
      event.preventDefault();
      event.stopPropagation();
    }
  }, {capture: true});
  // The sidebar overlays the page below Streamlit's 768 px breakpoint: a chat picked there closes it.
  window.addEventListener("click", (event) => {
    if (!event.isTrusted || window.innerWidth >= 768) return;
    const target = event.target.closest?.('div[class*="st-key-open-"] button, div[class*="st-key-new-chat"] button');
    if (!target || !target.closest('[data-testid="stSidebar"]')) return;
    setTimeout(() => click('[data-testid="stSidebarCollapseButton"] button'), 0);
  }, {capture: true});
})();</script>"""


def install() -> None:
    """Drawn at the end of the sidebar of every page (an empty element); the script guards against a second copy."""
    st.html(_SCRIPT, unsafe_allow_javascript=True)
