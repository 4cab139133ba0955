#!/usr/bin/env bash
# `make localstack-test`: the AWS tests (tests/resources, tests/localstack) against a LocalStack started
# here without Docker, stopped again at the end whatever the outcome.
#
# LocalStack runs outside its container image only on Python 3.13, from its own virtualenv
# (.venv-localstack, built once from localstack/requirements.txt, rebuilt when that file changes). The tests
# run with the project's .venv (`make setup`). Python 3.13 is taken from LOCALSTACK_PYTHON, else
# `python3.13` on PATH, else an installed pyenv 3.13.
#
# Usage: localstack/run-tests.sh [PYTEST ARGS...]
# Environment: LOCALSTACK_PYTHON (a Python 3.13), LOCALSTACK_VENV (default .venv-localstack),
#              LOCALSTACK_PORT (default 4566 when free, else any free port),
#              LOCALSTACK_OPTIONAL=1 (where no Python 3.13 is found: say so and exit 0 instead of failing;
#              .ci/run sets it).
set -euo pipefail

cd "$(dirname "$0")/.."

VENV="${LOCALSTACK_VENV:-.venv-localstack}"
REQUIREMENTS="localstack/requirements.txt"
STAMP="$VENV/.capa-requirements"
PROJECT_PYTHON=".venv/bin/python"

say() { echo "localstack-test: $*"; }
die() { echo "localstack-test: error: $*" >&2; exit 1; }

is_python313() {
    "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' >/dev/null 2>&1
}

# Sets PYTHON313 (in this shell, so that a missing Python can end the script).
find_python313() {
    local candidate version
    if [ -n "${LOCALSTACK_PYTHON:-}" ]; then
        is_python313 "$LOCALSTACK_PYTHON" || die "LOCALSTACK_PYTHON=$LOCALSTACK_PYTHON is not a working Python 3.13"
        PYTHON313="$LOCALSTACK_PYTHON"
        return
    fi
    # A pyenv shim is on PATH even where its version is not selected, so run the candidate, not just find it.
    if command -v python3.13 >/dev/null 2>&1 && is_python313 python3.13; then
        PYTHON313="$(command -v python3.13)"
        return
    fi
    if command -v pyenv >/dev/null 2>&1; then
        for version in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.13(\.[0-9]+)?$' | sort -t. -k3,3nr); do
            candidate="$(pyenv root)/versions/$version/bin/python3.13"
            if is_python313 "$candidate"; then
                PYTHON313="$candidate"
                return
            fi
        done
    fi
    local missing="LocalStack runs without Docker only on Python 3.13, and none was found: install Python 3.13
  (python3.13 on PATH, or 'pyenv install 3.13'), or set LOCALSTACK_PYTHON=/path/to/python3.13"
    if [ "${LOCALSTACK_OPTIONAL:-}" = 1 ]; then
        say "skipped: $missing"
        exit 0
    fi
    die "$missing"
}

[ -x "$PROJECT_PYTHON" ] || die "the project's virtualenv is missing: run 'make setup' (make localstack-test does)"

setup_started=$(date +%s)
wanted="$(cat "$REQUIREMENTS")"
if [ -x "$VENV/bin/python" ] && is_python313 "$VENV/bin/python" && [ -f "$STAMP" ] \
    && [ "$(cat "$STAMP")" = "$wanted" ]; then
    say "$VENV is up to date"
else
    find_python313
    say "building $VENV with $("$PYTHON313" --version) (takes about a minute, once)"
    rm -rf "$VENV"
    "$PYTHON313" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --requirement "$REQUIREMENTS"
    # Python 3.13's venv writes a .gitignore of '*' into the virtualenv: git never sees it.
    printf '%s' "$wanted" >"$STAMP"
fi
say "setup took $(($(date +%s) - setup_started))s"

exec "$VENV/bin/python" localstack/run_tests.py --project-python "$PROJECT_PYTHON" -- "$@"
