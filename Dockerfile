# The lccn-subscriber image used by compose.yaml.
FROM python:3.11-slim
RUN useradd --create-home --uid 10001 lccn
WORKDIR /src
COPY pyproject.toml README.md ./
COPY subscriber ./subscriber
COPY handlers ./handlers
COPY schemas ./schemas
RUN pip install --no-cache-dir . && rm -rf /src
USER lccn
ENV LCCN_HOME=/home/lccn
EXPOSE 8765
CMD ["lccn-subscriber", "serve"]
