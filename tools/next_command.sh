#!/usr/bin/env bash
# The last words of tools/run.sh: the command to type next, with the virtual environment's path
# (the `cudal2` command lives in it, not on the PATH).
#   bash tools/next_command.sh VENV gpu|cpu
set -euo pipefail
venv=$(cd "$1" && pwd)
activate=$(printf '. %q/bin/activate' "$venv")
echo
if [ "${2:-cpu}" = gpu ]; then
  echo "Next: activate the virtual environment and search another shape, or list what is tuned:"
  echo "  $activate && cudal2 search 8192x8192x8192"
  echo "  $activate && cudal2 show"
else
  echo "Next, without a GPU: activate the virtual environment and run a whole search on the recorded runner"
  echo "(synthetic numbers from a model, kept in their own store; README.md, 'Without a GPU'):"
  echo "  $activate && cudal2 search 4096x4096x4096 --runner recorded"
fi
