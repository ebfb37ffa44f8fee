#!/usr/bin/env bash
# How fast the kernel copies report files into a buffer at a given distance past a 64-byte
# boundary: why the reader (shim/format/src/read/buffer.rs) reads from a 64-byte boundary.
#
#   scripts/read-alignment.sh DIR [OFFSET ...]     (offsets in bytes; default: 0 16 32 48 64)
#
# Reads every *.json file under DIR (its first 3,000) once into the page cache, then once per
# offset, in rounds, and prints the seconds each offset took. Needs gcc.
set -euo pipefail
dir=${1:?usage: read-alignment.sh DIR [OFFSET ...]}
shift
if [ $# -gt 0 ]; then offsets=("$@"); else offsets=(0 16 32 48 64); fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/r.c" <<'C'
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
  int off = atoi(argv[1]);
  char *base = aligned_alloc(4096, 8 << 20), *buf = base + off;
  struct timespec a, b;
  long total = 0;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 2; i < argc; i++) {
    int fd = open(argv[i], O_RDONLY);
    ssize_t n;
    while (fd >= 0 && (n = read(fd, buf, 4 << 20)) > 0) total += n;
    if (fd >= 0) close(fd);
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("offset %4d: %.3f s for %ld MB\n", off,
         (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9, total >> 20);
  return 0;
}
C
gcc -O2 -o "$work/r" "$work/r.c"
mapfile -t files < <(find "$dir" -name '*.json' -type f | sort | head -3000)
cat "${files[@]}" > /dev/null
for round in 1 2 3; do
  for off in "${offsets[@]}"; do
    printf 'round %d, ' "$round"
    "$work/r" "$off" "${files[@]}"
  done
done
