/* build.c - `ctc build`: the C compiler or nvcc over the generated source and the
 * runtime, whose objects come from the cache described in build.h. */
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>
#include "build.h"

/* Runs argv and waits: its exit status, or -1. When `what` is given and the command is
 * still running after a few seconds (5 on a terminal; $CTC_PROGRESS seconds if set, also
 * when stderr is not a terminal), says once on stderr what it is doing, so a long build
 * of a large model is not silent. */
static int run_cmd_noting(char *const argv[], const char *what) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    execvp(argv[0], argv);
    _exit(127);
  }
  const char *env = getenv("CTC_PROGRESS");
  double after = env && *env ? atof(env) : isatty(2) ? 5 : -1;
  int st;
  for (long waited_ms = 0;; waited_ms += 50) {
    pid_t r = waitpid(pid, &st, what && after >= 0 ? WNOHANG : 0);
    if (r < 0) return -1;
    if (r == pid) break;
    if (what && after >= 0 && waited_ms >= after * 1000) {
      fprintf(stderr, "ctc build: %s ...\n", what);
      after = -1;   /* once; then wait */
      continue;
    }
    usleep(50000);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run_cmd(char *const argv[]) { return run_cmd_noting(argv, NULL); }

/* "compiling model.c (12,345 lines) with cc": the note of a long C compile. */
static const char *compile_note(Arena *a, const char *c_path, const char *cc_text) {
  FILE *f = fopen(c_path, "rb");
  long lines = 0;
  if (f) {
    for (int c; (c = getc(f)) != EOF;) lines += c == '\n';
    fclose(f);
  }
  return arena_printf(a, "compiling %s (%ld lines) with '%s'; a large unrolled model compiles faster with -O1",
                      c_path, lines, cc_text);
}

/* --verbose: the command, on stderr, as a shell would take it (words with blanks quoted). */
static void print_cmd(char *const argv[]) {
  fputs("ctc:", stderr);
  for (char *const *w = argv; *w; w++) fprintf(stderr, strpbrk(*w, " \t\"'$") || !**w ? " '%s'" : " %s", *w);
  fputc('\n', stderr);
}

/* Runs argv and returns its standard output (NULL when it cannot run or exits non-zero). */
static char *capture_cmd(Arena *a, char *const argv[]) {
  int fd[2];
  if (pipe(fd) < 0) return NULL;
  pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]);
    close(fd[1]);
    return NULL;
  }
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    if (!freopen("/dev/null", "w", stderr)) _exit(127);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(fd[1]);
  char buf[8192];
  size_t n = 0;
  for (ssize_t r; n < sizeof buf - 1 && (r = read(fd[0], buf + n, sizeof buf - 1 - n)) != 0;)
    if (r > 0) n += (size_t)r;
    else if (errno != EINTR) break;
  buf[n] = 0;
  close(fd[0]);
  int st;
  if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return NULL;
  return arena_strdup(a, buf);
}

/* A compiler given as one string, as make's $(CC) is ("cc -O1", "ccache gcc"): its words,
 * split on blanks (no quoting), NULL-terminated; *n their count. */
static char **cmd_words(Arena *a, const char *s, int *n) {
  int cap = 1;
  for (const char *p = s; *p; p++) cap += *p != ' ' && *p != '\t' && (p == s || p[-1] == ' ' || p[-1] == '\t');
  char **w = arena_alloc(a, sizeof *w * (size_t)cap);
  *n = 0;
  for (const char *p = s; *p;) {
    p += strspn(p, " \t");
    size_t len = strcspn(p, " \t");
    if (len) w[(*n)++] = arena_strndup(a, p, len);
    p += len;
  }
  w[*n] = NULL;
  return w;
}

/* Whether program `prog` can be run: a path that is executable, or a name found on $PATH. */
static int can_run(Arena *a, const char *prog) {
  if (strchr(prog, '/')) return access(prog, X_OK) == 0;
  const char *path = getenv("PATH");
  for (const char *s = path; s && *s;) {
    const char *e = strchr(s, ':');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (access(arena_printf(a, "%.*s/%s", (int)(n ? n : 1), n ? s : ".", prog), X_OK) == 0) return 1;
    s = e ? e + 1 : NULL;
  }
  return 0;
}

/* The C compiler's words (--cc, else $CC, else cc), after checking that it can be run:
 * NULL after a diagnostic naming where the command came from. */
static char **c_compiler(Arena *a, Diag *d, const Opts *o, int *n) {
  const char *env = getenv("CC"), *cc = o->cc ? o->cc : env && *env ? env : "cc";
  const char *from = o->cc ? "--cc" : env && *env ? "$CC" : "the default C compiler";
  char **w = cmd_words(a, cc, n);
  if (!*n) {
    diag_plain(d, "%s names no C compiler: it is empty", from);
    return NULL;
  }
  if (!can_run(a, w[0])) {
    diag_plain(d, "C compiler '%s' not found (%s is '%s'): install one, or name it with --cc "
                  "(a command with its arguments, e.g. --cc \"gcc -O1\") or $CC", w[0], from, cc);
    return NULL;
  }
  return w;
}

/* Whether one of the compiler's words starts with `prefix` ("cc -O1": -O). */
static int has_flag(char *const *cc, int ncc, const char *prefix) {
  for (int k = 1; k < ncc; k++)
    if (!strncmp(cc[k], prefix, strlen(prefix))) return 1;
  return 0;
}

/* ctc's optimisation flag: build -O<n>, else none when the compiler's command has its own
 * ("cc -O1"), else dflt. */
static char *opt_flag(const Opts *o, char *const *cc, int ncc, const char *dflt) {
  return o->opt_level ? (char *)o->opt_level : cc && has_flag(cc, ncc, "-O") ? NULL : (char *)dflt;
}

/* The words of the user's --cflags (they come after ctc's flags, so they win), appended to
 * flags at *nf (room for them assumed). */
static void user_cflags(Arena *a, const Opts *o, char **flags, int *nf) {
  for (int i = 0; i < o->cflags.len; i++) {
    int k;
    char **w = cmd_words(a, o->cflags.data[i], &k);
    for (int j = 0; j < k; j++) flags[(*nf)++] = w[j];
  }
}

/* How many words user_cflags appends. */
static int user_cflags_count(Arena *a, const Opts *o) {
  int n = 0, k;
  for (int i = 0; i < o->cflags.len; i++) cmd_words(a, o->cflags.data[i], &k), n += k;
  return n;
}

/* $env, else <dir of ctc>/../name (a folder of ctc's tree beside build/). */
static const char *beside_ctc(Arena *a, const char *env, const char *name) {
  const char *e = getenv(env);
  if (e && *e) return e;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return name;
  exe[n] = 0;
  return arena_printf(a, "%s/../%s", dirname(exe), name);
}

/* Where the runtime sources are: $CTC_RUNTIME_DIR, else <dir of ctc>/../runtime_min. */
const char *runtime_dir(Arena *a) { return beside_ctc(a, "CTC_RUNTIME_DIR", "runtime_min"); }

/* Where ctc's own Python packages are: $CTC_PYLIB_DIR, else <dir of ctc>/../pylib. */
const char *pylib_dir(Arena *a) { return beside_ctc(a, "CTC_PYLIB_DIR", "pylib"); }

/* The runtime files a program links (rt: the runtime folder), and `dist`, the distributed
 * build's communicator (rt_mpi.c, rt_nccl.c), when distributed; into *files, *n. 0, or an
 * exit code after a diagnostic naming a missing one. */
static int runtime_files(Arena *a, Diag *d, const char *rt, const char *dist, int distributed, const char ***files,
                         int *n) {
  static const char *const common[] = {"rt_error.c", "rt_safetensors.c", "rt_npy.c", "rt_model.c", "rt_driver.c",
                                       "rt_train.c", "rt_gradcheck.c", "rt_data.c", "rt_pt.c", "rt_profile.c",
                                       "rt_text.c"};
  const int nc = (int)(sizeof common / sizeof *common);
  const char **f = arena_alloc(a, sizeof *f * (size_t)(nc + 1));
  for (int i = 0; i < nc; i++) f[i] = common[i];
  *n = nc;
  if (distributed) f[(*n)++] = dist;
  for (int i = 0; i < *n; i++) {
    const char *path = arena_printf(a, "%s/%s", rt, f[i]);
    if (access(path, R_OK) != 0) {
      diag_plain(d, "runtime source '%s' not found (set CTC_RUNTIME_DIR to the runtime_min folder)", path);
      return CTC_EXIT_IO;
    }
  }
  *files = f;
  return 0;
}

/* Does the compiler `cc` (its words) compile and link the program `text` with the library `lib`
 * (-l<lib>)? `name` tells the probe's files apart. */
static int links_with(Arena *a, char *const *cc, int ncc, const char *dir, const char *name, const char *text,
                      const char *lib) {
  const char *src = arena_printf(a, "%s/.ctc_%s_probe_%d.c", dir, name, (int)getpid());
  const char *bin = arena_printf(a, "%s/.ctc_%s_probe_%d", dir, name, (int)getpid());
  FILE *f = fopen(src, "w");
  if (!f) return 0;
  fputs(text, f);
  fclose(f);
  pid_t pid = fork();
  int ok = 0;
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stderr)) _exit(127);
    char **argv = arena_alloc(a, sizeof *argv * (size_t)(ncc + 5));
    int n = 0;
    for (int k = 0; k < ncc; k++) argv[n++] = cc[k];
    argv[n++] = (char *)src, argv[n++] = "-o", argv[n++] = (char *)bin, argv[n++] = (char *)lib;
    argv[n] = NULL;
    execvp(argv[0], argv);
    _exit(127);
  } else if (pid > 0) {
    int st;
    waitpid(pid, &st, 0);
    ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  remove(src);
  remove(bin);
  return ok;
}

/* Whether the compiler `cc` builds for another machine than this one (its -dumpmachine triple's
 * first part is not uname's machine: aarch64-linux-gnu-gcc on x86_64), where -march=native means
 * nothing: the program is then built for the compiler's default CPU of its architecture. */
static int cross_compiler(Arena *a, char *const *cc, int ncc) {
  char **argv = arena_alloc(a, sizeof *argv * (size_t)(ncc + 2));
  for (int k = 0; k < ncc; k++) argv[k] = cc[k];
  argv[ncc] = "-dumpmachine", argv[ncc + 1] = NULL;
  const char *triple = capture_cmd(a, argv);
  struct utsname u;
  if (!triple || !*triple || uname(&u) != 0) return 0;
  const size_t n = strcspn(triple, "-\n");
  /* (Apple's clang says arm64 for aarch64) */
  if (!strcmp(u.machine, "aarch64") && n == 5 && !strncmp(triple, "arm64", 5)) return 0;
  return strlen(u.machine) != n || strncmp(triple, u.machine, n) != 0;
}

/* OpenBLAS's cblas, which the GEMMs call where ctc's own kernels do not run */
static int have_openblas(Arena *a, char *const *cc, int ncc, const char *dir) {
  return links_with(a, cc, ncc, dir, "blas",
                    "#include <cblas.h>\nint main(void){float a=1,b=1,c=0;"
                    "cblas_sgemm(CblasRowMajor,CblasNoTrans,CblasNoTrans,1,1,1,1.f,&a,1,&b,1,0.f,&c,1);return c!=1;}\n",
                    "-lopenblas");
}

/* zlib, which the runtime reads deflated checkpoint records and gzipped datasets with: without it
 * (a cross compiler's sysroot often has none) the runtime is built with -DCTC_NO_ZLIB and reads
 * stored records and uncompressed files only, saying so for the others */
static int have_zlib(Arena *a, char *const *cc, int ncc, const char *dir) {
  return links_with(a, cc, ncc, dir, "zlib", "#include <zlib.h>\nint main(void){return zlibVersion()[0] == 0;}\n",
                    "-lz");
}

/* --python: the include folder and extension suffix of the interpreter the module is for
 * ($PYTHON, else python3 on PATH). 0, or -1 after a diagnostic. */
static int python_config(Arena *a, Diag *d, const char **inc, const char **suffix) {
  FILE *f = popen("\"${PYTHON:-python3}\" -c 'import sysconfig; print(sysconfig.get_paths()[\"include\"]); "
                  "print(sysconfig.get_config_var(\"EXT_SUFFIX\") or \".so\")' 2>/dev/null", "r");
  char l1[PATH_MAX] = "", l2[256] = "";
  int ok = f && fgets(l1, sizeof l1, f) && fgets(l2, sizeof l2, f);
  int st = f ? pclose(f) : -1;
  l1[strcspn(l1, "\n")] = 0;
  l2[strcspn(l2, "\n")] = 0;
  const char *py = getenv("PYTHON") && *getenv("PYTHON") ? getenv("PYTHON") : "python3";
  if (!ok || st != 0 || !*l1) {
    diag_plain(d, "--python: cannot ask '%s' for its include folder (set PYTHON to the interpreter the module is for)", py);
    return -1;
  }
  char h[PATH_MAX + 16];
  snprintf(h, sizeof h, "%s/Python.h", l1);
  if (access(h, R_OK) != 0) {
    diag_plain(d, "--python: '%s' not found: the module needs the Python headers of '%s' (Debian: python3-dev)", h, py);
    return -1;
  }
  *inc = arena_strdup(a, l1);
  *suffix = arena_strdup(a, l2);
  return 0;
}

/* ---- the runtime object cache (build.h) ---------------------------------------------- */

/* FNV-1a over n bytes, 64 bits. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}
static uint64_t fnv_str(uint64_t h, const char *s) { return fnv(h, s ? s : "", s ? strlen(s) + 1 : 1); }

/* Hashes a file's contents into h; 0 when it cannot be read. */
static int fnv_file(uint64_t *h, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  unsigned char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) *h = fnv(*h, buf, n);
  int ok = !ferror(f);
  fclose(f);
  return ok;
}

/* The CPU's feature flags (what -march=native compiles for), or "". */
static const char *cpu_flags(Arena *a) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[8192];
  const char *r = "";
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "flags", 5) || !strncmp(line, "Features", 8)) {
      r = arena_strdup(a, line);
      break;
    }
  if (f) fclose(f);
  return r;
}

static int is_source(const struct dirent *e) {
  size_t n = strlen(e->d_name);
  return e->d_name[0] != '.' && n > 2 && e->d_name[n - 2] == '.' && (e->d_name[n - 1] == 'c' || e->d_name[n - 1] == 'h');
}

/* Removes a folder of plain files. */
static void remove_dir(Arena *a, const char *dir) {
  DIR *dp = opendir(dir);
  for (struct dirent *e; dp && (e = readdir(dp));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) remove(arena_printf(a, "%s/%s", dir, e->d_name));
  if (dp) closedir(dp);
  rmdir(dir);
}

/* mkdir -p of dir's last two components (~/.cache/ctc: .cache may not exist yet). */
static int make_dir(Arena *a, const char *dir) {
  if (mkdir(dir, 0755) == 0 || errno == EEXIST) return 0;
  char *parent = dirname(arena_strdup(a, dir));
  if (mkdir(parent, 0755) != 0 && errno != EEXIST) return -1;
  return mkdir(dir, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

/* The cache folder, created if need be; NULL when there is none (or it is not writable). */
static const char *cache_root(Arena *a) {
  const char *env = getenv("CTC_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME"), *dir;
  if (env) {
    if (!*env) return NULL;   /* CTC_CACHE_DIR= : no cache */
    dir = env;
  } else if (xdg && *xdg) {
    dir = arena_printf(a, "%s/ctc", xdg);
  } else if (home && *home) {
    dir = arena_printf(a, "%s/.cache/ctc", home);
  } else {
    return NULL;
  }
  return make_dir(a, dir) == 0 && access(dir, W_OK | X_OK) == 0 ? dir : NULL;
}

/* The objects of the runtime files `files` (in rt) compiled by cc with `flags` (NULL-terminated:
 * the compile flags, without -c and -o), from the cache, compiled into it first when they are not
 * there (all files at once, one process each). Their paths in *objs; *hit: whether they were
 * there. 0, or -1 when there is no cache or a compile failed: the caller then compiles the
 * sources itself (and the compiler's messages come from that). */
static int rt_objects(Arena *a, char *const *cc, int ncc, char *const *flags, const char *rt, const char *const *files,
                      int nfiles, const char ***objs, int *hit) {
  const char *root = cache_root(a);
  if (!root) return -1;
  uint64_t h = fnv_str(0xcbf29ce484222325ULL, "ctc runtime objects 1");
  char *version[3] = {cc[0], "--version", NULL};
  for (int k = 0; k < ncc; k++) h = fnv_str(h, cc[k]);   /* "cc -O1" is another compiler than cc */
  h = fnv_str(h, capture_cmd(a, version));
  h = fnv_str(h, getenv("OMPI_CC"));    /* the compiler an MPI wrapper runs */
  h = fnv_str(h, getenv("MPICH_CC"));
  for (char *const *f = flags; *f; f++) {
    h = fnv_str(h, *f);
    if (!strcmp(*f, "-march=native")) h = fnv_str(h, cpu_flags(a));
  }
  for (int i = 0; i < nfiles; i++) h = fnv_str(h, files[i]);
  struct dirent **ents = NULL;
  int ne = scandir(rt, &ents, is_source, alphasort), ok = ne > 0;
  for (int i = 0; i < ne; i++) {   /* every source and header: an edited runtime is another key */
    h = fnv_str(h, ents[i]->d_name);
    ok &= fnv_file(&h, arena_printf(a, "%s/%s", rt, ents[i]->d_name));
    free(ents[i]);
  }
  free(ents);
  if (!ok) return -1;
  const char *dir = arena_printf(a, "%s/rt-%016llx", root, (unsigned long long)h);
  const char **o = arena_alloc(a, sizeof *o * (size_t)nfiles);
  *hit = 1;
  for (int i = 0; i < nfiles; i++) {
    o[i] = arena_printf(a, "%s/%.*s.o", dir, (int)(strlen(files[i]) - 2), files[i]);
    *hit &= access(o[i], R_OK) == 0;
  }
  *objs = o;
  if (*hit) return 0;
  /* compile into a folder of this process's own, then rename it into place */
  const char *tmp = arena_printf(a, "%s.tmp%d", dir, (int)getpid());
  remove_dir(a, tmp);
  if (mkdir(tmp, 0755) != 0) return -1;
  int nf = 0;
  while (flags[nf]) nf++;
  pid_t *pids = arena_alloc(a, sizeof *pids * (size_t)nfiles);
  for (int i = 0; i < nfiles; i++) {
    char **argv = arena_alloc(a, sizeof *argv * (size_t)(ncc + nf + 6));
    int n = 0;
    for (int k = 0; k < ncc; k++) argv[n++] = cc[k];
    for (int k = 0; k < nf; k++) argv[n++] = flags[k];
    argv[n++] = "-c";
    argv[n++] = arena_printf(a, "%s/%s", rt, files[i]);
    argv[n++] = "-o";
    argv[n++] = arena_printf(a, "%s/%s", tmp, strrchr(o[i], '/') + 1);
    argv[n] = NULL;
    pids[i] = fork();
    if (pids[i] == 0) {
      if (!freopen("/dev/null", "w", stderr)) _exit(127);
      execvp(argv[0], argv);
      _exit(127);
    }
  }
  int failed = 0;
  for (int i = 0; i < nfiles; i++) {
    int st;
    if (pids[i] < 0 || waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) failed = 1;
  }
  if (!failed && rename(tmp, dir) != 0) {   /* another build put them there first, or a broken set is there */
    int there = 1;
    for (int i = 0; i < nfiles; i++) there &= access(o[i], R_OK) == 0;
    if (!there) {
      remove_dir(a, dir);
      failed = rename(tmp, dir) != 0;
    }
  }
  remove_dir(a, tmp);
  return failed ? -1 : 0;
}

int build_c_program(Arena *a, Diag *d, const Opts *o, const char *c_path, int distributed, const char *prefix) {
  int ncc;
  char **cc = c_compiler(a, d, o, &ncc);
  if (!cc) return CTC_EXIT_IO;
  const char *cc_text = o->cc ? o->cc : getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
  /* distributed builds: the MPI compiler wrapper around the same compiler, and rt_mpi.c */
  const char *mpicc = getenv("MPICC") && *getenv("MPICC") ? getenv("MPICC") : "mpicc";
  if (distributed) {
    if (o->cc || (getenv("CC") && *getenv("CC"))) {   /* the wrapper runs the compiler asked for */
      setenv("OMPI_CC", cc_text, 1);
      setenv("MPICH_CC", cc_text, 1);
    }
    cc = cmd_words(a, mpicc, &ncc);
    cc_text = mpicc;
    if (!ncc) {
      diag_plain(d, "$MPICC names no compiler wrapper: it is empty");
      return CTC_EXIT_IO;
    }
  }
  const char *rt = runtime_dir(a);
  char *outdup = arena_strdup(a, o->out);
  const char *outdir = dirname(outdup);
  int blas = !o->no_blas && have_openblas(a, cc, ncc, outdir), zlib = have_zlib(a, cc, ncc, outdir);
  const char **rt_files;
  int nrt, rc = runtime_files(a, d, rt, "rt_mpi.c", distributed, &rt_files, &nrt);
  if (rc) return rc;
  /* --shared / --python: a library of model.c and the runtime, position independent, without main() */
  const char *out = o->out, *py_inc = NULL, *py_mod = NULL;
  if (o->python) {
    const char *suffix;
    if (python_config(a, d, &py_inc, &suffix) < 0) return CTC_EXIT_USER;
    size_t len = strlen(o->out);
    if (!(len > 3 && !strcmp(o->out + len - 3, ".so"))) out = arena_printf(a, "%s%s", o->out, suffix);
    char *base = arena_strdup(a, o->out), *b = basename(base);
    b[strcspn(b, ".")] = 0;   /* the module's name: mlp.cpython-311-x86_64-linux-gnu.so -> mlp */
    int ident = *b && !(*b >= '0' && *b <= '9');
    for (const char *q = b; *q; q++) ident &= *q == '_' || (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') ||
                                              (*q >= '0' && *q <= '9');
    if (!ident) {
      diag_plain(d, "--python -o %s: the module name '%s' is not a Python identifier", o->out, b);
      return CTC_EXIT_USER;
    }
    py_mod = b;
    const char *src = arena_printf(a, "%s/python/ctc_pymodule.c", rt);
    if (access(src, R_OK) != 0) {
      diag_plain(d, "runtime source '%s' not found (set CTC_RUNTIME_DIR to the runtime_min folder)", src);
      return CTC_EXIT_IO;
    }
  }
  /* the flags every file is compiled with (the runtime's cached objects too): ctc's, then the
   * user's -O<n> and --cflags, which win (the last -O and -march are the ones that count) */
  int nuser = user_cflags_count(a, o);
  char **flags = arena_alloc(a, sizeof *flags * (size_t)(16 + nuser));
  int nf = 0;
  flags[nf++] = "-std=c11";
  char *opt = opt_flag(o, cc, ncc, "-O3");
  if (opt) flags[nf++] = opt;
  if (!has_flag(cc, ncc, "-march=") && !has_flag(cc, ncc, "-mcpu=") && !cross_compiler(a, cc, ncc))
    flags[nf++] = "-march=native";
  /* sqrtf and the like need not set errno (nothing reads it): without this, every sqrt is an
   * instruction plus a branch to libm for a negative input, and no loop over one (Adam's
   * update, a norm) vectorises. Nor do floating-point operations trap (nothing unmasks the
   * exceptions): without -fno-trapping-math GCC sinks an add computed before a select into the
   * select's branch and then will not if-convert it, so a loop such as relu's backward of a
   * residual sum, where(x <= 0, 0, a + b), stays a scalar loop of branches. The values are the same. */
  flags[nf++] = "-fno-math-errno";
  flags[nf++] = "-fno-trapping-math";
  flags[nf++] = "-D_POSIX_C_SOURCE=200809L";
  if (o->shared || o->python) flags[nf++] = "-fPIC";
  if (blas) flags[nf++] = "-DCTC_HAVE_CBLAS";
  if (!zlib) flags[nf++] = "-DCTC_NO_ZLIB";
  if (distributed) flags[nf++] = "-DCTC_MPI";
  if (!o->no_openmp) flags[nf++] = "-fopenmp";
  flags[nf++] = arena_printf(a, "-I%s", rt);
  user_cflags(a, o, flags, &nf);
  flags[nf] = NULL;
  const char **objs = NULL;
  int hit = 0, cached = rt_objects(a, cc, ncc, flags, rt, rt_files, nrt, &objs, &hit) == 0;
  char **argv = arena_alloc(a, sizeof *argv * (size_t)(ncc + nf + nrt + 24));
  int n = 0;
  for (int k = 0; k < ncc; k++) argv[n++] = cc[k];
  for (int k = 0; k < nf; k++) argv[n++] = flags[k];
  if (o->shared || o->python) argv[n++] = "-shared";
  else argv[n++] = "-DCTC_MAIN";
  if (o->shared) {
    char *base = arena_strdup(a, o->out);
    argv[n++] = arena_printf(a, "-Wl,-soname,%s", basename(base));
  }
  if (o->python) {
    argv[n++] = arena_printf(a, "-I%s", py_inc);
    argv[n++] = arena_printf(a, "-DCTC_PY_MODULE=%s", py_mod);
    argv[n++] = arena_printf(a, "-DCTC_PY_DESC=%s_desc", prefix);
    argv[n++] = arena_printf(a, "%s/python/ctc_pymodule.c", rt);
  }
  argv[n++] = (char *)c_path;
  for (int i = 0; i < nrt; i++) argv[n++] = cached ? (char *)objs[i] : arena_printf(a, "%s/%s", rt, rt_files[i]);
  argv[n++] = "-o";
  argv[n++] = (char *)out;
  if (blas) argv[n++] = "-lopenblas";
  if (zlib) argv[n++] = "-lz";
  argv[n++] = "-lm";
  argv[n] = NULL;
  if (o->verbose) print_cmd(argv);
  rc = run_cmd_noting(argv, compile_note(a, c_path, cc_text));
  if (rc != 0) {
    if (distributed && rc == 127)
      diag_plain(d, "'%s' not found: a distributed build needs MPI's compiler wrapper (Debian: libopenmpi-dev; "
                    "or set MPICC)", cc_text);
    else
      diag_plain(d, "the C compiler '%s' failed (exit %d) building '%s'", cc_text, rc, out);
    return CTC_EXIT_IO;
  }
  if (o->stats)
    fprintf(stderr, "ctc: built %s with %s%s%s; the runtime's objects %s\n", out, cc_text, blas ? " +openblas" : "",
            o->no_openmp ? "" : " +openmp",
            !cached ? "compiled with it (no cache)"
                    : arena_printf(a, "%s the cache (%.*s)", hit ? "from" : "compiled into", (int)(strrchr(objs[0], '/') - objs[0]), objs[0]));
  return 0;
}

/* A distributed CUDA build: MPI's compile and link flags for nvcc, from the MPI compiler
 * wrapper ($MPICC, else mpicc): Open MPI's --showme:compile/--showme:link, else MPICH's
 * -show (the whole command line; its compiler is dropped). -I -D -L -l go to nvcc as
 * they are, -Wl,X as -Xlinker X, anything else as -Xcompiler. Appends to argv at *n
 * (at most max); 0, or -1 after a diagnostic. */
static int mpi_flags_for_nvcc(Arena *a, Diag *d, char **argv, int *n, int max) {
  const char *mpicc = getenv("MPICC") && *getenv("MPICC") ? getenv("MPICC") : "mpicc";
  char *show[3] = {(char *)mpicc, "--showme:compile", NULL};
  char *comp = capture_cmd(a, show), *text;
  if (comp) {
    show[1] = "--showme:link";
    char *link = capture_cmd(a, show);
    text = link ? arena_printf(a, "%s %s", comp, link) : NULL;
  } else {
    show[1] = "-show";
    text = capture_cmd(a, show);
    if (text) text += strcspn(text, " \t\n");   /* MPICH: "gcc -I... -L... -lmpi" */
  }
  if (!text) {
    diag_plain(d, "cannot ask '%s' for MPI's compile and link flags: a distributed CUDA build needs MPI to start its "
                  "ranks (Debian: libopenmpi-dev; or set MPICC)", mpicc);
    return -1;
  }
  char *save = NULL;
  for (char *tok = strtok_r(text, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save)) {
    if (*n + 2 >= max) {
      diag_plain(d, "'%s' gives too many MPI flags for ctc to pass to nvcc", mpicc);
      return -1;
    }
    if (!strncmp(tok, "-I", 2) || !strncmp(tok, "-D", 2) || !strncmp(tok, "-L", 2) || !strncmp(tok, "-l", 2)) {
      argv[(*n)++] = tok;
    } else if (!strncmp(tok, "-Wl,", 4)) {
      argv[(*n)++] = "-Xlinker";
      argv[(*n)++] = tok + 4;
    } else {
      argv[(*n)++] = "-Xcompiler";
      argv[(*n)++] = tok;
    }
  }
  return 0;
}

/* Whether an nvcc build gets cuDNN (-DCTC_HAVE_CUDNN -lcudnn): cudnn.h and libcudnn.so in the
 * toolkit's folders beside nvcc's bin/, or in Debian's (/usr/include, /usr/lib/<triplet>), where
 * nvcc looks by itself; --emulate builds always (runtime_min/cuda_emu/ctc_cudnn_emu.h).
 * CTC_CUDNN=0 leaves it out: the convolutions are im2col + cuBLAS. */
static int use_cudnn(Arena *a, const char *nvcc, int emulate) {
  const char *env = getenv("CTC_CUDNN");
  if (env && !strcmp(env, "0")) return 0;
  if (emulate) return 1;
  char *bin = dirname(arena_strdup(a, nvcc));
  const char *root = dirname(arena_strdup(a, bin));
  const char *inc[] = {arena_printf(a, "%s/include", root), "/usr/include", "/usr/local/include"};
  const char *lib[] = {arena_printf(a, "%s/lib64", root), arena_printf(a, "%s/lib", root), "/usr/lib/x86_64-linux-gnu",
                       "/usr/lib/aarch64-linux-gnu", "/usr/local/lib"};
  int h = 0, l = 0;
  for (size_t i = 0; i < sizeof inc / sizeof *inc && !h; i++) h = access(arena_printf(a, "%s/cudnn.h", inc[i]), R_OK) == 0;
  for (size_t i = 0; i < sizeof lib / sizeof *lib && !l; i++) l = access(arena_printf(a, "%s/libcudnn.so", lib[i]), R_OK) == 0;
  return h && l;
}

/* The CUDA target's program: nvcc over model.cu and the runtime's C files (which
 * nvcc hands to the host C compiler), linked with cuBLAS; with --emulate, the .cu
 * as C++ against runtime_min/cuda_emu and the runtime as C, with the C compiler's
 * driver (-x c++, -lstdc++) and OpenMP. A distributed build adds -DCTC_NCCL,
 * rt_nccl.c (the NCCL communicator), MPI's flags and -lnccl. */
int build_cuda_program(Arena *a, Diag *d, const Opts *o, const char *cu_path, int distributed) {
  const char *rt = runtime_dir(a);
  const char **rt_files;
  int nrt, rc = runtime_files(a, d, rt, "rt_nccl.c", distributed, &rt_files, &nrt);
  if (rc) return rc;
  if (distributed && o->emulate) BUG("--emulate --distributed got past the option checks");
  const char *tool;
  char **words = NULL;   /* --emulate: the C compiler's words (a command with arguments, as make's $(CC)) */
  int nwords = 0;
  if (o->emulate) {
    if (!(words = c_compiler(a, d, o, &nwords))) return CTC_EXIT_IO;   /* the C driver, -x c++ for the .cu */
    tool = words[0];
  } else {
    tool = getenv("NVCC") && *getenv("NVCC") ? getenv("NVCC") : NULL;
    if (!tool) {
      const char *path = getenv("PATH");
      for (const char *s = path; s && *s && !tool;) {
        const char *e = strchr(s, ':');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        const char *cand = arena_printf(a, "%.*s/nvcc", (int)n, s);
        if (n && access(cand, X_OK) == 0) tool = cand;
        s = e ? e + 1 : NULL;
      }
    }
    if (!tool && access("/usr/local/cuda/bin/nvcc", X_OK) == 0) tool = "/usr/local/cuda/bin/nvcc";
    if (!tool) {
      diag_plain(d, "nvcc not found (set NVCC, or build for the CPU with --emulate); the source is in '%s'", cu_path);
      return CTC_EXIT_IO;
    }
  }
  char **argv = arena_alloc(a, sizeof *argv * (size_t)(160 + nwords + user_cflags_count(a, o)));
  int n = 0;
  if (words)
    for (int k = 0; k < nwords; k++) argv[n++] = words[k];
  else
    argv[n++] = (char *)tool;
  char *opt = opt_flag(o, words, nwords, "-O2");
  if (opt) argv[n++] = opt;
  argv[n++] = "-DCTC_MAIN";
  argv[n++] = "-D_POSIX_C_SOURCE=200809L";
  argv[n++] = arena_printf(a, "-I%s", rt);
  const int dnn = use_cudnn(a, tool, o->emulate);
  if (dnn) argv[n++] = "-DCTC_HAVE_CUDNN";
  if (o->emulate) {
    argv[n++] = arena_printf(a, "-I%s/cuda_emu", rt);
    argv[n++] = "-DCTC_CUDA_EMULATE";
    argv[n++] = "-fopenmp";
    argv[n++] = "-x";
    argv[n++] = "c++";
  } else {
    argv[n++] = "-gencode";
    argv[n++] = "arch=compute_80,code=sm_80";
    argv[n++] = "-gencode";
    argv[n++] = "arch=compute_90,code=[sm_90,compute_90]";
  }
  user_cflags(a, o, argv, &n);   /* after ctc's, so they win */
  if (distributed) {
    argv[n++] = "-DCTC_NCCL";
    if (mpi_flags_for_nvcc(a, d, argv, &n, 140) < 0) return CTC_EXIT_IO;
  }
  argv[n++] = (char *)cu_path;
  /* --emulate: the runtime as C, its objects from the cache (build.h) when there is one */
  const char **objs = NULL;
  int hit = 0, cached = 0;
  if (o->emulate) {
    char **flags = arena_alloc(a, sizeof *flags * (size_t)(5 + user_cflags_count(a, o)));
    int nf = 0;
    if (opt) flags[nf++] = opt;
    flags[nf++] = "-D_POSIX_C_SOURCE=200809L", flags[nf++] = arena_printf(a, "-I%s", rt);
    flags[nf++] = "-fopenmp";
    user_cflags(a, o, flags, &nf);
    flags[nf] = NULL;
    cached = rt_objects(a, words, nwords, flags, rt, rt_files, nrt, &objs, &hit) == 0;
    argv[n++] = "-x", argv[n++] = cached ? "none" : "c";   /* objects, or the sources as C */
  }
  for (int i = 0; i < nrt; i++) argv[n++] = cached ? (char *)objs[i] : arena_printf(a, "%s/%s", rt, rt_files[i]);
  if (o->emulate && !cached) argv[n++] = "-x", argv[n++] = "none";
  argv[n++] = "-o";
  argv[n++] = (char *)o->out;
  argv[n++] = o->emulate ? "-lstdc++" : "-lcublas";
  if (dnn && !o->emulate) argv[n++] = "-lcudnn";
  if (distributed) argv[n++] = "-lnccl";
  argv[n++] = "-lz";
  argv[n++] = "-lm";
  argv[n] = NULL;
  if (o->verbose) print_cmd(argv);
  rc = run_cmd(argv);
  if (rc != 0) {
    diag_plain(d, "'%s' failed (exit %d) building '%s'%s", tool, rc, o->out,
               distributed ? " (a distributed CUDA build needs NCCL: nccl.h and libnccl where nvcc finds them, "
                             "e.g. the CUDA toolkit's or Debian's libnccl-dev)" : "");
    return CTC_EXIT_IO;
  }
  if (o->stats)
    fprintf(stderr, "ctc: built %s with %s%s%s%s\n", o->out, tool, dnn ? " +cudnn" : "",
            o->emulate ? " (CUDA emulated on the CPU)" : distributed ? " +mpi +nccl" : "",
            !o->emulate ? ""
            : !cached   ? "; the runtime's objects compiled with it (no cache)"
                        : hit ? "; the runtime's objects from the cache" : "; the runtime's objects compiled into the cache");
  return 0;
}

