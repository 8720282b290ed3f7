"""System prompts by id. A turn stores the id it was answered with, so a prompt is never edited in place:
add a new id (default-v2) and point CHAT_SYSTEM_PROMPT_ID at it."""

SYSTEM_PROMPTS: dict[str, str] = {
    "default-v1": (
        "You are the company's internal assistant. Answer the employee's question directly and concisely, "
        "in Markdown. Use code blocks for code and tables for comparisons. If you are not sure, say so."
    ),
}


def system_prompt(prompt_id: str) -> str:
    """The text of a prompt id; unknown ids (a prompt retired since) fall back to the default."""
    return SYSTEM_PROMPTS.get(prompt_id, SYSTEM_PROMPTS["default-v1"])
