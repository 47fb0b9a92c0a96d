/* parse_dump.c - test driver: parse each file named on the command line and
 * print its AST dump (fe_dump) on stdout; diagnostics go to stderr.
 *
 *   parse_dump [-q] FILE...
 *
 * -q parses and dumps into /dev/null (for batches of fuzz inputs). Exit status:
 * 0 when every file parsed, 1 when any reported an error, 2 when a file could
 * not be read. */
#include "../../frontend/frontend.h"

#include <errno.h>
#include <string.h>

int main(int argc, char **argv) {
  int quiet = 0, rc = 0;
  FILE *null = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-q") == 0) {
      quiet = 1;
      if (!null) null = fopen("/dev/null", "w");
      continue;
    }
    Arena *a = arena_new();
    Diag d;
    diag_init(&d, stderr);
    SrcFile *f = src_read(a, argv[i]);
    if (!f) {
      diag_plain(&d, "cannot read %s: %s", argv[i], strerror(errno));
      arena_free(a);
      rc = 2;
      continue;
    }
    Node *m = fe_parse(a, &d, f);
    if (m) {
      fe_dump(quiet && null ? null : stdout, m);
    } else {
      if (d.nerrors == 0) diag_plain(&d, "fe_parse returned NULL without a diagnostic for %s", argv[i]);
      if (rc == 0) rc = 1;
    }
    arena_free(a);
  }
  if (null) fclose(null);
  return rc;
}
