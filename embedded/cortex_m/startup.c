/* startup.c - the reset handler and vector table of a bare-metal Cortex-M4F program (QEMU's
 * mps2-an386, linker script mps2_an386.ld): enables the FPU, copies .data from flash, zeroes
 * .bss, calls main() and reports its status through semihosting. No C library start-up code
 * (link with -nostartfiles). */
#include <stdint.h>

#include "semihost.h"

extern uint32_t __data_load[], __data_start[], __data_end[], __bss_start[], __bss_end[], __stack_top[];
int main(void);

void Reset_Handler(void) __attribute__((noreturn));
void Reset_Handler(void) {
  /* CPACR: full access to CP10 and CP11 (the FPU) before any floating-point instruction */
  *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
  __asm__ volatile("dsb\n\tisb" ::: "memory");
  volatile uint32_t *src = __data_load, *dst = __data_start;
  while (dst < __data_end) *dst++ = *src++;
  for (dst = __bss_start; dst < __bss_end;) *dst++ = 0;
  sh_exit(main());
}

static void Fault_Handler(void) {
  sh_puts("fault\n");
  sh_exit(3);
}

__attribute__((section(".vectors"), used)) static void (*const vectors[16])(void) = {
    (void (*)(void))(uintptr_t)__stack_top,   /* initial stack pointer */
    Reset_Handler,
    Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler,   /* NMI, HardFault, MemManage, BusFault, UsageFault */
    0, 0, 0, 0,
    Fault_Handler, Fault_Handler, 0, Fault_Handler, Fault_Handler,   /* SVCall, DebugMon, -, PendSV, SysTick */
};
