"""A local server that answers Bedrock runtime's InvokeModel for embedding models (Cohere Embed v4, Titan v2), so
the real boto3 bedrock-runtime client is tested offline; every request (path, headers, JSON body) is kept."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote


class FakeBedrockEmbed:
    def __init__(self, dimensions: int = 256) -> None:
        self.requests: list[dict] = []
        self.status = 200
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                path = unquote(self.path)
                fake.requests.append(
                    {"path": path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
                )
                if fake.status != 200:
                    answer = {"message": "throttled"}
                elif "titan" in path:
                    answer = {"embedding": [0.5] * body["dimensions"], "inputTextTokenCount": 3}
                else:
                    answer = {
                        "id": "x",
                        "embeddings": {"float": [[0.25] * body["output_dimension"] for _ in body["texts"]]},
                        "texts": body["texts"],
                    }
                data = json.dumps(answer).encode()
                self.send_response(fake.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if fake.status == 200:
                    self.send_header("X-Amzn-Bedrock-Input-Token-Count", "11")
                else:
                    self.send_header("x-amzn-ErrorType", "ThrottlingException")
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
