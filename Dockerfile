# The app's image: the runtime requirements only, run by a user other than root, Streamlit listening on every
# interface because the load balancer (not a browser on this host) connects to it. Build and push: README,
# "Deploying behind SSO". Local try-out: docker run -p 8501:8501 <image> (the demo: local backend, dev identity).
FROM python:3.11-slim

# numpy's BLAS on one thread: its helper threads spin after every vector product, on the cores the page needs
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OPENBLAS_NUM_THREADS=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CHAT_DATA_DIR=/home/chat/.chat-data

WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt \
 && useradd --create-home --uid 10001 --shell /usr/sbin/nologin chat

# Only what the app runs; the files stay root's, so the app cannot change its own code.
COPY app.py ./
COPY lib/ lib/
COPY pages/ pages/
COPY .streamlit/config.toml .streamlit/config.toml

USER chat
EXPOSE 8501
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=3)"]
# SIGTERM (docker stop, ECS) reaches Streamlit directly (exec form, PID 1): it stops, and the usage ledger is flushed.
CMD ["streamlit", "run", "app.py", "--server.address", "0.0.0.0", "--server.port", "8501"]
