# syntax=docker/dockerfile:1
# The dralloc operator image: the `operators` package and its runtime dependencies in a
# virtualenv, copied onto a slim Python base and run as an unprivileged user.
#   docker build -t dralloc:0.1.0 .
#   docker run --rm dralloc:0.1.0 --help        (every setting, as a flag or DRALLOC_* variable)
# PYTHON_IMAGE can be any image whose `python` (3.11+) has the venv module; both stages use
# it, so the virtualenv's interpreter is the runtime's. testbed/image builds this file
# unchanged with buildah on a Debian bookworm base it makes locally (no registry needed).
ARG PYTHON_IMAGE=python:3.12-slim-bookworm

# --- build: resolve and install the package into /opt/dralloc ------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# A named account for the operator's id: kopf looks its own user name up (getpass.getuser),
# and without a passwd entry the operator dies at start-up.
RUN groupadd --system --gid 65532 dralloc \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin dralloc
RUN python -m venv /opt/dralloc
# Only what the package needs to build: no tests, manifests or testbed (see .dockerignore).
COPY pyproject.toml README.md ./
COPY operators ./operators
RUN /opt/dralloc/bin/pip install --no-compile . \
 && /opt/dralloc/bin/python -m compileall -q /opt/dralloc/lib

# --- runtime: the virtualenv alone, no compilers, no pip cache, no source tree --------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="dralloc" \
      org.opencontainers.image.description="Kubernetes DRA with structured parameters, as a kopf operator" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/dralloc/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/dralloc /opt/dralloc
# The account made in the build stage (same base, so the rest of these files is the same).
COPY --from=build /etc/passwd /etc/group /etc/
# The same numeric id as the Deployment's runAsUser, so runAsNonRoot can verify it.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 8081 9443
ENTRYPOINT ["python", "-m", "operators"]
