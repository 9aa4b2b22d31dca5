#!/bin/sh
# The last step of examples/repo-report.yml: its prompt (on stdin) carries the other steps'
# results as <herd:context> blocks; it turns them into a Markdown report.
mkdir -p target
out=target/repo-report.md
{
  echo "# Repository report"
  echo
  sed -e 's/^<herd:context source="step:\(.*\)" trusted="false">$/## \1\n```/' \
      -e 's/^<\/herd:context>$/```\n/' \
      -e '/^<herd:user_prompt>$/,/^<\/herd:user_prompt>$/d'
} > "$out"
echo "wrote $out ($(wc -l < "$out") lines, $(grep -c '^## ' "$out") sections)"
