/* validate.c - `--validate` (see validate.h): NVRTC over the generated kernels, libclang over the
 * generated C (and the CUDA target's host side), both loaded with dlopen. The few prototypes
 * needed are declared here (no nvrtc.h or clang-c/Index.h at build time), so ctc builds and
 * runs on machines without either. */
#include "validate.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the generated text's top-level items ---------------------------------------- */

/* A top-level construct of the generated text: a preprocessor line, a declaration, or a
 * function definition (with its name). Lines are 1-based. */
typedef struct Item {
  size_t beg, end;     /* [beg, end) in the text */
  int line, last;      /* first and last line */
  int pp, func;        /* a preprocessor line; a function definition */
  int dev, global;     /* __device__, __global__, __constant__, ... in its head; a __global__ kernel */
  size_t close;        /* func: offset of the body's closing brace */
  const char *name;    /* func: its name (arena) */
} Item;
typedef Vec(Item) Items;

static int is_ident(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* The name of a function from its head [beg, brace): the identifier before the parameter list
 * (the parenthesis matching the last ')'). */
static const char *func_name(Arena *a, const char *s, size_t beg, size_t brace) {
  size_t i = brace;
  while (i > beg && s[i - 1] != ')') i--;
  if (i == beg) return NULL;
  int d = 0;
  for (i--; i > beg; i--) {   /* s[i] == ')' at first */
    if (s[i] == ')') d++;
    else if (s[i] == '(' && --d == 0) break;
  }
  while (i > beg && (s[i - 1] == ' ' || s[i - 1] == '\n' || s[i - 1] == '\t')) i--;
  size_t e = i;
  while (i > beg && is_ident(s[i - 1])) i--;
  return e > i ? arena_strndup(a, s + i, e - i) : NULL;
}

static int head_has(const char *s, size_t beg, size_t end, const char *w) {
  size_t n = strlen(w);
  for (size_t i = beg; i + n <= end; i++)
    if (!memcmp(s + i, w, n)) return 1;
  return 0;
}

/* Splits `s` into top-level items. Comments and string literals are skipped; `extern "C" {`
 * blocks are transparent; preprocessor lines inside an item belong to it. */
static Items scan(Arena *a, const char *s) {
  Items v = {0};
  size_t n = strlen(s), i = 0, brace = 0;
  int line = 1, bol = 1, depth = 0, paren = 0, xc = 0, in = 0;
  Item cur = {0};
  while (i < n) {
    char c = s[i];
    if (c == '\n') {
      line++, bol = 1, i++;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f') {
      i++;
      continue;
    }
    if (c == '/' && s[i + 1] == '*') {
      for (i += 2; i < n && !(s[i] == '*' && s[i + 1] == '/'); i++) line += s[i] == '\n';
      i = i < n ? i + 2 : n;
      continue;
    }
    if (c == '/' && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') i++;
      continue;
    }
    if (c == '#' && bol) {   /* a preprocessor line, with its continuations */
      size_t b = i;
      int l0 = line;
      while (i < n && s[i] != '\n') {
        if (s[i] == '\\' && s[i + 1] == '\n') i++, line++;
        i++;
      }
      if (!in && depth == 0) vec_push(a, &v, ((Item){.beg = b, .end = i, .line = l0, .last = line, .pp = 1}));
      continue;
    }
    bol = 0;
    if (!in) {
      cur = (Item){.beg = i, .line = line};
      in = 1, brace = 0, paren = 0;
    }
    if (c == '"' || c == '\'') {
      for (i++; i < n && s[i] != c && s[i] != '\n'; i++)
        if (s[i] == '\\') i++;
      i++;
      continue;
    }
    int done = 0;
    if (c == '(') paren++;
    else if (c == ')') paren--;
    else if (c == '{') {
      if (depth == 0 && !brace) {
        size_t e = i;
        while (e > cur.beg && (s[e - 1] == ' ' || s[e - 1] == '\n')) e--;
        if (e - cur.beg == 10 && !memcmp(s + cur.beg, "extern \"C\"", 10)) {   /* transparent */
          xc++, in = 0, i++;
          continue;
        }
        brace = i;
        cur.func = e > cur.beg && s[e - 1] == ')';
      }
      depth++;
    } else if (c == '}') {
      if (depth == 0) {   /* the end of an extern "C" block */
        if (xc) xc--;
        in = 0, i++;
        continue;
      }
      if (--depth == 0 && cur.func) done = 1, cur.close = i;
    } else if (c == ';' && depth == 0 && paren == 0)
      done = 1;
    i++;
    if (done) {
      cur.end = i, cur.last = line, in = 0;
      size_t head = brace ? brace : i;
      cur.dev = head_has(s, cur.beg, head, "__device__") || head_has(s, cur.beg, head, "__global__") ||
                head_has(s, cur.beg, head, "__constant__") || head_has(s, cur.beg, head, "__shared__") ||
                head_has(s, cur.beg, head, "__managed__");
      /* a type whose members are device code (the attention tiles' ctc_attn_arg) goes with it */
      cur.dev |= !cur.func && head_has(s, cur.beg, i, "__device__");
      cur.global = head_has(s, cur.beg, head, "__global__");
      if (cur.func) cur.name = func_name(a, s, cur.beg, brace);
      vec_push(a, &v, cur);
    }
  }
  return v;
}

/* The function containing `line`, or NULL. */
static const Item *item_at(const Items *v, int line) {
  for (int i = 0; i < v->len; i++)
    if (v->data[i].func && v->data[i].line <= line && line <= v->data[i].last) return &v->data[i];
  return NULL;
}

static const char *what(const Item *it, int cuda) {
  if (!it) return "file scope";
  return it->global ? "kernel" : cuda && it->dev ? "device function" : "function";
}

/* TEST-ONLY HOOK: $CTC_VALIDATE_INJECT=NAME declares an unused variable (a warning, so a failure)
 * at the end of the body of the generated function or kernel NAME, in the text validated (not in
 * the file written), so that the tests see a broken kernel reported. Lines do not move. */
static const char *inject(Arena *a, const char *text, const Items *v) {
  const char *name = getenv("CTC_VALIDATE_INJECT");
  if (!name || !*name) return text;
  for (int i = 0; i < v->len; i++)
    if (v->data[i].func && v->data[i].name && !strcmp(v->data[i].name, name)) {
      size_t at = v->data[i].close;
      return arena_printf(a, "%.*s int ctc_validate_injected; %s", (int)at, text, text + at);
    }
  fprintf(stderr, "ctc: note: CTC_VALIDATE_INJECT: no function '%s' in the generated code\n", name);
  return text;
}

/* A library from $env (only that) or the candidates; NULL with the reason in *why. */
static void *load(Arena *a, const char *env, const char *const *cands, int ncand, const char **why) {
  const char *e = getenv(env);
  if (e && *e) {
    void *h = dlopen(e, RTLD_NOW | RTLD_LOCAL);
    if (!h) *why = arena_printf(a, "$%s: %s", env, dlerror());
    return h;
  }
  *why = NULL;
  for (int i = 0; i < ncand; i++) {
    void *h = dlopen(cands[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    if (!*why) *why = arena_printf(a, "%s", dlerror());
  }
  return NULL;
}

static void bug_footer(void) { fprintf(stderr, "  this is a bug in ctc; please report it with the input file\n"); }

/* ---- NVRTC ------------------------------------------------------------------------ */

typedef struct NvrtcProg *nvrtcProgram;
typedef struct Nvrtc {
  int (*create)(nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *);
  int (*compile)(nvrtcProgram, int, const char *const *);
  int (*log_size)(nvrtcProgram, size_t *);
  int (*log)(nvrtcProgram, char *);
  int (*destroy)(nvrtcProgram *);
} Nvrtc;

/* An #include of a device header NVRTC compiles (from the toolkit's include folders). */
static int device_include(const char *s) {
  static const char *const hs[] = {"<cuda_fp16.h>", "<cuda_bf16.h>", "<cuda_fp8.h>", "<cooperative_groups", "<mma.h>",
                                   "<cuda/", "<cub/"};
  if (strncmp(s, "#include", 8)) return 0;
  for (s += 8; *s == ' '; s++) {}
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
    if (!strncmp(s, hs[i], strlen(hs[i]))) return 1;
  return 0;
}

/* The kernels' translation unit: fixed-width types and the libm macros NVRTC has no headers
 * for, the header's and the .cu's macros, then every __device__/__global__/__constant__ item at
 * its own line (`#line`), `static` blanked (the host code that launches them is not there). */
static char *device_tu(Arena *a, const char *text, const Items *v, const char *h_text, const Items *hv,
                       const char *path) {
  char *out;
  size_t len;
  FILE *f = open_memstream(&out, &len);
  CHECK(f);
  fputs("#line 1 \"<--validate prelude>\"\n"
        "typedef signed char int8_t;\ntypedef unsigned char uint8_t;\ntypedef short int16_t;\n"
        "typedef unsigned short uint16_t;\ntypedef int int32_t;\ntypedef unsigned int uint32_t;\n"
        "typedef long long int64_t;\ntypedef unsigned long long uint64_t;\n"
        "typedef unsigned long uintptr_t;\ntypedef long intptr_t;\n"
        "#define INT64_C(c) c##LL\n#define UINT64_C(c) c##ULL\n#define INT32_MIN (-2147483647 - 1)\n"
        "#define INT32_MAX 2147483647\n#define INT64_MAX 9223372036854775807LL\n#define INT64_MIN (-INT64_MAX - 1)\n"
        "#define INFINITY __int_as_float(0x7f800000)\n#define NAN __int_as_float(0x7fffffff)\n"
        "#define FLT_MAX 3.402823466e+38F\n",
        f);
  for (int i = 0; i < hv->len; i++)
    if (hv->data[i].pp && !strncmp(h_text + hv->data[i].beg, "#define", 7))
      fprintf(f, "%.*s\n", (int)(hv->data[i].end - hv->data[i].beg), h_text + hv->data[i].beg);
  for (int i = 0; i < v->len; i++) {
    const Item *it = &v->data[i];
    const char *s = text + it->beg;
    int n = (int)(it->end - it->beg);
    if (it->pp) {
      if (device_include(s) || (strncmp(s, "#include", 8) && strncmp(s, "#pragma", 7))) fprintf(f, "%.*s\n", n, s);
    } else if (it->dev) {
      /* at its line and column in the generated file */
      size_t col = 0;
      while (it->beg - col > 0 && text[it->beg - col - 1] != '\n') col++;
      fprintf(f, "#line %d \"%s\"\n%*s", it->line, path, (int)col, "");
      if (!strncmp(s, "static ", 7)) fputs("       ", f), s += 7, n -= 7;
      fprintf(f, "%.*s\n", n, s);
    }
  }
  fclose(f);
  char *r = arena_strdup(a, out);
  free(out);
  return r;
}

/* 0 when every kernel compiled without a diagnostic for both architectures; 1 when NVRTC is
 * unavailable (a note printed); CTC_EXIT_BUG after printing the diagnostics. */
static int nvrtc_check(Arena *a, const char *text, const Items *v, const char *h_text, const char *path) {
  static const char *const cands[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                                      "/usr/local/cuda/lib64/libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13",
                                      "/usr/local/cuda/lib64/libnvrtc.so.12"};
  const char *why = NULL;
  void *lib = NULL;
  const char *home = getenv("CUDA_HOME");
  if (home && *home && !(getenv("CTC_NVRTC") && *getenv("CTC_NVRTC")))
    lib = dlopen(arena_printf(a, "%s/lib64/libnvrtc.so", home), RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = load(a, "CTC_NVRTC", cands, (int)(sizeof cands / sizeof cands[0]), &why);
  Nvrtc nv = {0};
  if (lib) {
    *(void **)&nv.create = dlsym(lib, "nvrtcCreateProgram");
    *(void **)&nv.compile = dlsym(lib, "nvrtcCompileProgram");
    *(void **)&nv.log_size = dlsym(lib, "nvrtcGetProgramLogSize");
    *(void **)&nv.log = dlsym(lib, "nvrtcGetProgramLog");
    *(void **)&nv.destroy = dlsym(lib, "nvrtcDestroyProgram");
    if (!nv.create || !nv.compile || !nv.log_size || !nv.log || !nv.destroy) {
      why = "a function is missing";
      dlclose(lib);
      lib = NULL;
    }
  }
  if (!lib) {
    fprintf(stderr, "ctc: note: --validate: NVRTC is unavailable (%s): the kernels were not compiled for sm_80 and "
                    "sm_90\n", why ? why : "not found");
    return 1;
  }
  Items hv = scan(a, h_text);
  const char *tu = device_tu(a, text, v, h_text, &hv, path);
  static const char *const archs[] = {"sm_80", "sm_90"};
  /* the toolkit's headers, for the device headers a kernel may include (CUDA 13: cccl/) */
  const char *root = home && *home ? home : "/usr/local/cuda";
  const char *inc = arena_printf(a, "-I%s/include", root), *cccl = arena_printf(a, "-I%s/include/cccl", root);
  int bad = 0;
  for (int k = 0; k < 2 && !bad; k++) {
    nvrtcProgram prog = NULL;
    if (nv.create(&prog, tu, path, 0, NULL, NULL) != 0) {
      fprintf(stderr, "ctc: note: --validate: NVRTC is unavailable (nvrtcCreateProgram failed): the kernels were not "
                      "compiled\n");
      dlclose(lib);
      return 1;
    }
    const char *opts[] = {arena_printf(a, "--gpu-architecture=%s", archs[k]), "-std=c++17", inc, cccl};
    int rc = nv.compile(prog, 4, opts);
    size_t n = 0;
    nv.log_size(prog, &n);
    char *log = arena_alloc(a, n + 1);
    if (n) nv.log(prog, log);
    nv.destroy(&prog);
    /* diagnostics: "PATH(LINE): error|warning...: message" */
    int ndiag = 0;
    for (const char *l = log; *l;) {
      const char *e = strchr(l, '\n');
      int len = e ? (int)(e - l) : (int)strlen(l);
      const char *p = strstr(l, "): ");
      if (p && p - l < len) {
        const char *q = p;
        while (q > l && q[-1] >= '0' && q[-1] <= '9') q--;
        const char *msg = p + 3;
        if (q < p && q > l && q[-1] == '(' &&
            (!strncmp(msg, "error", 5) || !strncmp(msg, "warning", 7) || !strncmp(msg, "catastrophic", 12))) {
          int ln = atoi(q);
          int from_gen = (size_t)(q - 1 - l) == strlen(path) && !strncmp(l, path, strlen(path));
          const Item *it = from_gen ? item_at(v, ln) : NULL;
          if (++ndiag <= 20)
            fprintf(stderr, "ctc: internal error: --validate: NVRTC (%s) rejects %s%s%s%s at %.*s:%d: %.*s\n",
                    archs[k], what(it, 1), it ? " '" : "", it && it->name ? it->name : "", it ? "'" : "",
                    (int)(q - 1 - l), l, ln, len - (int)(msg - l), msg);
        }
      }
      l = e ? e + 1 : l + len;
    }
    if (rc != 0 && !ndiag) {
      fprintf(stderr, "ctc: internal error: --validate: NVRTC (%s) failed (status %d):\n%s\n", archs[k], rc, log);
      ndiag = 1;
    }
    if (ndiag > 20) fprintf(stderr, "ctc: ... and %d more NVRTC diagnostics\n", ndiag - 20);
    bad = ndiag > 0;
  }
  dlclose(lib);
  if (bad) bug_footer();
  return bad ? CTC_EXIT_BUG : 0;
}

/* ---- libclang --------------------------------------------------------------------- */

typedef struct { const void *data; unsigned flags; } CXString;
typedef struct { const void *ptr[2]; unsigned data; } CXSourceLocation;
struct CXUnsavedFile {
  const char *Filename;
  const char *Contents;
  unsigned long Length;
};
typedef struct Clang {
  void *(*create_index)(int, int);
  void (*dispose_index)(void *);
  int (*parse2)(void *, const char *, const char *const *, int, struct CXUnsavedFile *, unsigned, unsigned, void **);
  void (*dispose_tu)(void *);
  unsigned (*ndiag)(void *);
  void *(*diag)(void *, unsigned);
  void (*dispose_diag)(void *);
  int (*severity)(void *);
  CXSourceLocation (*location)(void *);
  void (*spelling_loc)(CXSourceLocation, void **, unsigned *, unsigned *, unsigned *);
  CXString (*file_name)(void *);
  CXString (*spelling)(void *);
  CXString (*option)(void *, CXString *);
  const char *(*cstr)(CXString);
  void (*dispose_str)(CXString);
} Clang;

/* 0 when libclang parsed the text without a warning; 1 when libclang is unavailable (a note
 * printed); CTC_EXIT_BUG after printing the diagnostics. */
static int clang_check(Arena *a, const char *text, const Items *v, const char *h_text, const char *path,
                       const char *h_path, int cuda, const char *rt) {
  const char *cands[32];
  int nc = 0;
  cands[nc++] = "libclang.so";
  cands[nc++] = "libclang.so.1";
  for (int ver = 20; ver >= 11; ver--) {
    cands[nc++] = arena_printf(a, "libclang-%d.so.1", ver);
    cands[nc++] = arena_printf(a, "/usr/lib/llvm-%d/lib/libclang.so.1", ver);
  }
  const char *why = NULL;
  void *lib = load(a, "CTC_LIBCLANG", cands, nc, &why);
  Clang c = {0};
  if (lib) {
    void **fp[] = {(void **)&c.create_index, (void **)&c.dispose_index, (void **)&c.parse2, (void **)&c.dispose_tu,
                   (void **)&c.ndiag, (void **)&c.diag, (void **)&c.dispose_diag, (void **)&c.severity,
                   (void **)&c.location, (void **)&c.spelling_loc, (void **)&c.file_name, (void **)&c.spelling,
                   (void **)&c.option, (void **)&c.cstr, (void **)&c.dispose_str};
    const char *names[] = {"clang_createIndex", "clang_disposeIndex", "clang_parseTranslationUnit2",
                           "clang_disposeTranslationUnit", "clang_getNumDiagnostics", "clang_getDiagnostic",
                           "clang_disposeDiagnostic", "clang_getDiagnosticSeverity", "clang_getDiagnosticLocation",
                           "clang_getSpellingLocation", "clang_getFileName", "clang_getDiagnosticSpelling",
                           "clang_getDiagnosticOption", "clang_getCString", "clang_disposeString"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
      if (!(*fp[i] = dlsym(lib, names[i]))) {
        why = arena_printf(a, "no %s", names[i]);
        dlclose(lib);
        lib = NULL;
        break;
      }
  }
  const char *whose = cuda ? "the host side (as --emulate builds it) was not parsed" : "the generated C was not parsed";
  if (!lib) {
    fprintf(stderr, "ctc: note: --validate: libclang is unavailable (%s): %s\n", why ? why : "not found", whose);
    return 1;
  }
  const char *inc = arena_printf(a, "-I%s", rt), *emu = arena_printf(a, "-I%s/cuda_emu", rt);
  /* the C target twice: portable (no BLAS, no OpenMP), and as `ctc build` compiles it where
   * OpenBLAS is found (cblas, OpenMP pragmas); the CUDA host side as --emulate compiles it
   * (with the cuDNN branches) */
  const char *cargs[] = {"-std=c11", "-D_POSIX_C_SOURCE=200809L", "-DCTC_MAIN", inc, "-Wall", "-Wextra",
                         "-DCTC_HAVE_CBLAS", "-fopenmp"};
  const char *cuargs[] = {"-x", "c++", "-std=c++17", "-DCTC_CUDA_EMULATE", "-DCTC_HAVE_CUDNN", "-DCTC_MAIN",
                          "-D_POSIX_C_SOURCE=200809L", inc, emu, "-Wall", "-Wextra"};
  struct CXUnsavedFile un[2] = {{path, text, (unsigned long)strlen(text)},
                                {h_path, h_text, (unsigned long)strlen(h_text)}};
  void *idx = c.create_index(0, 0);
  int ndiag = 0;
  for (int variant = 0; variant < (cuda ? 1 : 2); variant++) {
    void *tu = NULL;
    const char *label = cuda ? "" : variant ? " (OpenBLAS, OpenMP)" : " (portable)";
    int rc = cuda ? c.parse2(idx, path, cuargs, (int)(sizeof cuargs / sizeof cuargs[0]), un, 2, 0, &tu)
                  : c.parse2(idx, path, cargs, variant ? 8 : 6, un, 2, 0, &tu);
    if (rc != 0 || !tu) {
      fprintf(stderr, "ctc: note: --validate: libclang could not parse '%s'%s (error %d): %s\n", path, label, rc,
              whose);
      continue;
    }
    unsigned nd = c.ndiag(tu);
    for (unsigned i = 0; i < nd; i++) {
      void *dg = c.diag(tu, i);
      int sev = c.severity(dg);
      if (sev >= 2) {   /* CXDiagnostic_Warning, Error, Fatal */
        void *file = NULL;
        unsigned line = 0, col = 0;
        c.spelling_loc(c.location(dg), &file, &line, &col, NULL);
        CXString fn = file ? c.file_name(file) : (CXString){0};
        const char *fname = file ? c.cstr(fn) : NULL;
        CXString msg = c.spelling(dg), opt = c.option(dg, NULL);
        const char *m = c.cstr(msg), *o = c.cstr(opt);
        const Item *it = fname && !strcmp(fname, path) ? item_at(v, (int)line) : NULL;
        if (variant && sev == 4 && strstr(m, "file not found"))   /* no OpenBLAS headers here */
          fprintf(stderr, "ctc: note: --validate: libclang: the OpenBLAS/OpenMP variant of '%s' was not parsed (%s)\n",
                  path, m);
        else if (++ndiag <= 20)
          fprintf(stderr, "ctc: internal error: --validate: libclang%s rejects %s%s%s%s at %s:%u:%u: %s: %s%s%s%s\n",
                  label, what(it, cuda), it ? " '" : "", it && it->name ? it->name : "", it ? "'" : "",
                  fname ? fname : "?", line, col, sev == 2 ? "warning" : "error", m, o && *o ? " [" : "",
                  o && *o ? o : "", o && *o ? "]" : "");
        c.dispose_str(msg);
        c.dispose_str(opt);
        if (file) c.dispose_str(fn);
      }
      c.dispose_diag(dg);
    }
    c.dispose_tu(tu);
    if (ndiag) break;
  }
  if (ndiag > 20) fprintf(stderr, "ctc: ... and %d more libclang diagnostics\n", ndiag - 20);
  c.dispose_index(idx);
  dlclose(lib);
  if (ndiag) bug_footer();
  return ndiag ? CTC_EXIT_BUG : 0;
}

/* ---- the entry ---------------------------------------------------------------------- */

int ctc_validate(Arena *a, const char *c_text, const char *h_text, const char *c_path, const char *h_path, int cuda,
                 const char *rt_dir) {
  Items v = scan(a, c_text);
  const char *text = inject(a, c_text, &v);
  if (text != c_text) v = scan(a, text);
  int rc = 0;
  if (cuda) {
    rc = nvrtc_check(a, text, &v, h_text, c_path);
    if (rc == CTC_EXIT_BUG) return rc;
  }
  rc = clang_check(a, text, &v, h_text, c_path, h_path, cuda, rt_dir);
  return rc == CTC_EXIT_BUG ? rc : 0;
}
