/* fuzz_file.h - for the reader harnesses: the input bytes as a file with a path
 * (a memfd, /proc/self/fd/N), since the runtime's readers take paths. */
#ifndef FUZZ_FILE_H
#define FUZZ_FILE_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* Replaces the contents of the harness's one memfd by data; its path into path[64]. */
static int fuzz_file(const uint8_t *data, size_t size, char path[64]) {
  static int fd = -1; /* one file for the whole run */
  if (fd < 0 && (fd = memfd_create("fuzz", 0)) < 0) return -1;
  if (ftruncate(fd, 0) != 0) return -1;
  size_t off = 0;
  while (off < size) {
    ssize_t w = pwrite(fd, data + off, size - off, (off_t)off);
    if (w <= 0) return -1;
    off += (size_t)w;
  }
  snprintf(path, 64, "/proc/self/fd/%d", fd);
  return 0;
}
#endif
