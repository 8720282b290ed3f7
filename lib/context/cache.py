"""What the context engine keeps per browser session (the page holds one in st.session_state).

Owned by the page's thread: a worker thread never gets this object, only a private copy of the memories
(lib.turn.chat.Handoff), and the page applies what the worker added with `learn_memories`.

Turn pools per chat (the turns the page loaded and the recall hits read by id; nothing read for them)
and the user's memories (read once, 1 Query, then kept current by this session's own extractions and
edits). Bounded: a few chats of at most MAX_POOL_TURNS turns each, so a long browser session does not
grow without limit. A
memory added or edited in another tab shows here after a reload (a new browser session).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import MutableMapping

from lib.context.recall import TurnPool
from lib.storage.records import Instructions, Memory

MAX_POOLS = 4  # chats per browser session; each holds at most lib.context.recall.MAX_POOL_TURNS turns


@dataclass
class MemoryState:
    memories: list[Memory]
    enabled: bool
    instructions: Instructions = field(default_factory=Instructions)  # the user's own, read in the same Query


@dataclass
class ContextCache:
    pools: OrderedDict = field(default_factory=OrderedDict)
    memory: dict[str, MemoryState] = field(default_factory=dict)
    max_pools: int = MAX_POOLS
    # (user_id, project_id) -> Project: read once per browser session for its chats' prompts, then kept current
    # by this session's own edits and moves of the project (docs/projects.md)
    projects: dict = field(default_factory=dict)

    def learn_project(self, user_id: str, project) -> None:
        """This session created, edited or moved a project forward: its next question uses it without a read."""
        self.projects[(user_id, project.project_id)] = project

    def pool(self, user_id: str, session_id: str) -> TurnPool:
        key = (user_id, session_id)
        found = self.pools.get(key)
        if found is None:
            found = self.pools[key] = TurnPool()
        self.pools.move_to_end(key)
        while len(self.pools) > self.max_pools:
            self.pools.popitem(last=False)
        return found

    def learn_memories(self, user_id: str, added) -> None:
        """Memories a worker kept from this session's question: a new list, never the one a reader may be
        iterating (only the page's own run calls this; a worker extracts into a private copy)."""
        state = self.memory.get(user_id)
        if state is None or not added:
            return
        known = {m.memory_id for m in state.memories}
        fresh = [m for m in added if m.memory_id not in known]
        if fresh:
            self.memory[user_id] = MemoryState(state.memories + fresh, state.enabled, state.instructions)

    def learn_instructions(self, user_id: str, instructions: Instructions) -> None:
        """This session saved the user's instructions: its next question uses them without a read."""
        state = self.memory.get(user_id)
        if state is not None:
            self.memory[user_id] = MemoryState(state.memories, state.enabled, instructions)

    def forget_memories(self, user_id: str) -> None:
        """After the Memory page changed something: the next question reads them again (1 Query)."""
        self.memory.pop(user_id, None)


STATE_KEY = "context_cache"


def cache_in(state: MutableMapping) -> ContextCache:
    """The browser session's ContextCache (pass st.session_state): the chat page and the Memory page share it."""
    found = state.get(STATE_KEY)
    if not isinstance(found, ContextCache):
        found = state[STATE_KEY] = ContextCache()
    return found
