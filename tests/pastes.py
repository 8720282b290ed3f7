"""Text people paste into a question: a Python traceback, a 40-line log."""

TRACEBACK = """Traceback (most recent call last):
  File "/app/main.py", line 12, in <module>
    main()
  File "/app/main.py", line 8, in main
    user = users[row["user_id"]]
             ~~~~~^^^^^^^^^^^^^^^
KeyError: 'user_id'"""

LOG = "\n".join(
    f"2026-11-06 08:{i:02d}:01,123 {'ERROR' if i % 7 == 0 else 'INFO '} worker-{i % 3}  job {i} took {i * 3} ms"
    for i in range(40)
)
