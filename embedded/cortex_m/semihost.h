/* semihost.h - output and exit through Arm semihosting (QEMU: -semihosting), for the
 * Cortex-M test programs: no C library, no UART driver. */
#ifndef CTC_SEMIHOST_H
#define CTC_SEMIHOST_H
#include <stdint.h>

void sh_puts(const char *s);              /* SYS_WRITE0: a NUL-terminated string to the host's stdout */
void sh_put_hex(uint32_t v);              /* 8 hex digits */
void sh_put_dec(uint32_t v);
void sh_exit(int status) __attribute__((noreturn));   /* SYS_EXIT: 0 = success, else failure */
/* SysTick as a counter of the core clock (24 bits, counting down from 0xFFFFFF); under
 * `qemu-system-arm -icount shift=0` it advances with the instructions executed. */
void sh_tick_start(void);
uint32_t sh_tick_elapsed(void);           /* ticks since sh_tick_start (< 2^24) */
#endif
