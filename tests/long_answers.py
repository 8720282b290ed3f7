"""Long Markdown answers like Claude writes them (headings, paragraphs, code fences, tables, lists, quotes),
for the streaming tests and bench/stream_render.py."""

from __future__ import annotations

SECTION = """## Section {i}: keys and access patterns

Start from the queries, then choose the keys. Each turn is one item, so a long chat never rewrites a growing
list; the **partition key** groups a session, the *sort key* orders its turns, and `ScanIndexForward=False`
reads the newest first. See [the design](https://example.com/design/{i}) for the trade-offs.

```python
def newest_turns_{i}(client, user_id, session_id, limit=20):
    response = client.query(
        TableName="chat",
        KeyConditionExpression="pk = :pk",

        ExpressionAttributeValues={{":pk": {{"S": f"USER#{{user_id}}#SES#{{session_id}}"}}}},
        ScanIndexForward=False,
        Limit=limit,
    )
    return response["Items"]
```

| record | pk | sk | serves |
|---|---|---|---|
| list item | USER#u-{i} | SES#time#sid | sidebar |
| meta | USER#u-{i}#SES#sid | SES#META | open |
| message | USER#u-{i}#SES#sid | MSG#mid | turns |

1. Commit the question in one transaction.
2. Stream the answer; nothing touches the table meanwhile.
   - a nested point about retries
3. Finish or fail the turn with one UpdateItem.

> A quoted remark for section {i}: acknowledged means durable.

"""


def long_answer(size: int) -> str:
    """A Markdown answer of about `size` characters (whole sections, trimmed to end on a paragraph)."""
    parts, total, i = [], 0, 0
    while total < size:
        section = SECTION.format(i=i)
        parts.append(section)
        total += len(section)
        i += 1
    return "".join(parts).rstrip() + "\n\nThat is all."


def chunks_of(text: str, size: int = 20) -> list[str]:
    """The answer as a model streams it: small pieces, cut anywhere (inside fences and table rows too)."""
    return [text[i : i + size] for i in range(0, len(text), size)]
