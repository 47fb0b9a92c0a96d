/* semihost.c - see semihost.h. Semihosting on Armv7-M: `bkpt 0xab` with the operation in r0
 * and its argument in r1. */
#include "semihost.h"

static uint32_t sh_call(uint32_t op, const void *arg) {
  register uint32_t r0 __asm__("r0") = op;
  register const void *r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

void sh_puts(const char *s) { sh_call(0x04, s); }

void sh_put_hex(uint32_t v) {
  char b[9];
  for (int i = 7; i >= 0; i--, v >>= 4) b[i] = "0123456789abcdef"[v & 15];
  b[8] = 0;
  sh_puts(b);
}

void sh_put_dec(uint32_t v) {
  char b[11];
  int i = 10;
  b[i] = 0;
  do b[--i] = (char)('0' + v % 10), v /= 10;
  while (v);
  sh_puts(b + i);
}

void sh_exit(int status) {
  /* ADP_Stopped_ApplicationExit: QEMU exits 0; ADP_Stopped_RunTimeErrorUnknown: 1 */
  sh_call(0x18, (const void *)(uintptr_t)(status == 0 ? 0x20026u : 0x20023u));
  for (;;) {
  }
}

#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)

void sh_tick_start(void) {
  SYST_CSR = 0;
  SYST_RVR = 0xFFFFFFu;
  SYST_CVR = 0;        /* any write clears it: reloads from RVR */
  SYST_CSR = 5;        /* enabled, the core clock, no interrupt */
}

uint32_t sh_tick_elapsed(void) { return 0xFFFFFFu - (SYST_CVR & 0xFFFFFFu); }
