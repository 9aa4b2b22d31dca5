#!/bin/sh
# A tiny "agent" for the command backend: reads its task on stdin and reports on the
# repository it runs in. No model, no network, no API key.
task=$(cat)
echo "task: $task"
if git rev-parse --show-toplevel >/dev/null 2>&1; then
  root=$(git rev-parse --show-toplevel)
  echo "repository: $(basename "$root") at $(git rev-parse --short HEAD 2>/dev/null || echo 'no commits')"
  echo "tracked files: $(git ls-files | wc -l)"
  echo "rust lines: $(git ls-files '*.rs' | xargs cat 2>/dev/null | wc -l)"
  echo "largest files:"
  git ls-files -z | xargs -0 wc -l 2>/dev/null | grep -v ' total$' | sort -rn | head -5 | sed 's/^/  /'
else
  echo "not a git repository: $(pwd)"
  echo "files: $(find . -type f | wc -l)"
fi
