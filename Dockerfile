# The capa-py controller image: `docker build -t capa-py:$(capa --version | cut -d" " -f2) .`
# The Deployment from `capa manifests deployment` runs it as user 65532 with a read-only root filesystem.

FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY capa_py ./capa_py
COPY controllers ./controllers
COPY resources ./resources
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.12-slim
COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# No bytecode writes at run time (the root filesystem is read-only); /tmp is an emptyDir.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
USER 65532:65532
ENTRYPOINT ["capa"]
