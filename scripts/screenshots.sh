#!/usr/bin/env bash
# Regenerates the dashboard screenshots in docs/ (docs/dashboard-*-light.png
# and -dark.png) that the README shows, from the browser tests: real nodes on
# a throwaway PostgreSQL, headless Chromium (scripts/test.sh starts the one
# and installs the other when missing).
#
#   bash scripts/screenshots.sh
#
# The pictures show what the tests do: a kill -9 of the leader and the
# takeover, a job failing every run, a stale singleton, a job's pictures, the
# leadership history, the sign-in and the confirmation of an action.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec bash scripts/test.sh -run 'TestFailoverOnPage|TestNoTokenNoChange|TestBrokenFirst' ./internal/dashtest/ -args -screenshots "$PWD/docs"
