#!/usr/bin/env bash
# Instantiate a cuda-h200 template at its defaults, overridden by NAME=VALUE arguments:
#   dsl_templates/cuda-h200/instantiate.sh TEMPLATE.template.yaml [-o OUT.cu] [NAME=VALUE ...]
# The template format is every target's: the one script in dsl_templates/npu-sim/ does the work.
exec "$(dirname "${BASH_SOURCE[0]}")/../npu-sim/instantiate.sh" "$@"
