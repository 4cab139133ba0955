# The capa-py controller image: `capa manifests deployment` runs it as
# `capa --store kube controller --leader-elect ...` under uid 65532 with a read-only root filesystem.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY capa_py ./capa_py
COPY capa_app ./capa_app
COPY resources ./resources
COPY controllers ./controllers
RUN pip install . && rm -rf /src

RUN groupadd --gid 65532 capa \
    && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin capa

USER 65532:65532
WORKDIR /tmp
ENV HOME=/tmp
ENTRYPOINT ["capa"]
CMD ["--help"]
