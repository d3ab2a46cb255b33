/*
 * A tiny guest whose memory dirty rate the test sets: a multiboot kernel
 * (QEMU's -kernel loads it in 32-bit protected mode, no firmware boot) that
 * rewrites one word in every 4 KiB page of a working set, forever.
 *
 * The kernel command line's last word (QEMU passes the image's file name
 * first) is WSS[f][@RATE]:
 *   WSS   the working set in MiB, from 16 MiB up; 0 for none (the guest
 *         halts once filled).
 *   f     first write every page of RAM from 16 MiB up, so that migration
 *         moves bytes, as a guest's used memory does, not zero pages.
 *   RATE  rewrite at most RATE MiB/s of the working set (a guest that dirties
 *         as fast as its vCPU runs rewrites a small set faster than any link,
 *         however much it is slowed down). The pace follows the TSC,
 *         calibrated against the PIT at boot, and the guest sleeps (hlt,
 *         woken by the PIT at 2 kHz) while it is ahead, as a real workload's
 *         vCPU idles; a batch that falls behind by more than 1 ms (the vCPU
 *         throttled or not scheduled) is not caught up: the work is lost,
 *         as a CPU-bound guest's is under a throttle.
 *
 * The guest counts its passes over the working set in the word at COUNTER
 * and the 64 KiB batches it wrote in the word at BATCHES (physical), which
 * the tests read through the monitor (HMP xp): the work it did while a
 * migration ran. READY turns 1 once it filled its RAM and calibrated.
 *
 * Build: as --32 -o dirty.o dirty.S && ld -m elf_i386 -Ttext=0x100000 -o dirty.elf dirty.o
 */
	.set COUNTER, 0xfff000		/* the page below the working set */
	.set TPB, COUNTER+4		/* TSC ticks per batch of pages; 0: no pace */
	.set DLLO, COUNTER+8		/* deadline of the next batch (TSC) */
	.set DLHI, COUNTER+12
	.set NOWLO, COUNTER+16
	.set NOWHI, COUNTER+20
	.set WSS, COUNTER+24		/* MiB */
	.set RATE, COUNTER+28		/* MiB/s; 0: as fast as it runs */
	.set FILL, COUNTER+32
	.set BATCHES, COUNTER+36		/* 64 KiB batches written */
	.set SLACK, COUNTER+40		/* TSC ticks a batch may be late: 1 ms */
	.set READY, COUNTER+44		/* 1 once filled and calibrated */
	.set IDT, 0xffe000		/* 256 gates, all to tick; the stack below */
	.set BASE, 0x1000000		/* 16 MiB: clear of this image and of COUNTER */
	.set BATCH, 0xffff		/* a batch is 64 KiB: 16 pages */
	/* number DST: the decimal at %esi into DST, %esi past it. */
	.macro number dst
	xorl %edx, %edx
.Ldigit\@:
	movzbl (%esi), %eax
	subl $'0', %eax
	cmpl $9, %eax
	ja .Ldone\@
	imull $10, %edx
	addl %eax, %edx
	incl %esi
	jmp .Ldigit\@
.Ldone\@:
	movl %edx, \dst
	.endm

	.code32
	.text
	.globl _start
	.align 4
multiboot:
	.long 0x1BADB002		/* magic */
	.long 0				/* flags: an ELF image needs none */
	.long -0x1BADB002		/* checksum */
_start:
	cli
	lgdt gdtr			/* ours: the loader's may be gone */
	ljmp $8, $1f
1:	movw $16, %ax
	movw %ax, %ds
	movw %ax, %es
	movw %ax, %ss
	xorl %eax, %eax
	movl %eax, READY
	movl %eax, BATCHES
	movl %eax, TPB
	movl %eax, WSS
	movl %eax, RATE
	movl %eax, FILL
	testl $4, (%ebx)		/* multiboot info: a command line? */
	jz idle
	movl 16(%ebx), %esi
	movl %esi, %edi			/* after the last space */
5:	movzbl (%esi), %eax
	incl %esi
	testl %eax, %eax
	jz 6f
	cmpl $' ', %eax
	jne 5b
	movl %esi, %edi
	jmp 5b
6:	movl %edi, %esi
	number WSS
	cmpb $'f', (%esi)
	jne 1f
	movl $1, FILL
	incl %esi
1:	cmpb $'@', (%esi)
	jne 2f
	incl %esi
	number RATE
2:	cmpl $0, FILL
	je calibrate
	testl $1, (%ebx)		/* memory figures? */
	jz calibrate
	movl 8(%ebx), %ebp		/* mem_upper: KiB above 1 MiB */
	shll $10, %ebp
	addl $0x100000, %ebp		/* end of RAM */
	movl $BASE, %eax
7:	cmpl %ebp, %eax
	jae calibrate
	movl %eax, (%eax)		/* a page that is not zero */
	addl $4096, %eax
	jmp 7b

	/* TSC ticks in 10 ms: PIT channel 2 in mode 0 counts 11932 ticks of
	 * 1.193182 MHz, its output (port 0x61 bit 5) rises at the end. The
	 * least of 8 tries: a vCPU not scheduled when it rises reads late. */
calibrate:
	cmpl $0, RATE
	je run
	movl $-1, %ebp
	movl $8, %edi
cal:	inb $0x61, %al
	andb $0xfd, %al			/* speaker off */
	orb $1, %al			/* gate on */
	outb %al, $0x61
	movb $0xb0, %al			/* channel 2, lo/hi byte, mode 0 */
	outb %al, $0x43
	movb $0x9c, %al			/* 11932 = 0x2e9c */
	outb %al, $0x42
	movb $0x2e, %al
	outb %al, $0x42
	rdtsc
	movl %eax, %ebx
3:	inb $0x61, %al
	testb $0x20, %al
	jz 3b
	rdtsc
	subl %ebx, %eax			/* ticks per 10 ms */
	cmpl %ebp, %eax
	jae 5f
	movl %eax, %ebp
5:	decl %edi
	jnz cal
	movl %ebp, %eax
	xorl %edx, %edx			/* slack: 1 ms, twice the PIT's tick */
	movl $10, %ecx
	divl %ecx
	movl %eax, SLACK
	movl %ebp, %eax
	movl RATE, %ecx
	/* ticks per batch = ticks per s / batches per s
	 *                 = 100 * t10 / (RATE * 16) = 25 * t10 / (4 * RATE) */
	imull $25, %eax
	xorl %edx, %edx
	shll $2, %ecx
	divl %ecx
	movl %eax, TPB
	/* While ahead the guest sleeps: every vector to tick, the PIT's
	 * channel 0 at 2 kHz (mode 2, 597), IRQ 0 unmasked; interrupts stay
	 * off except in hlt. */
	movl $IDT, %esp
	movl $tick, %eax
	movl $0x80000, %edx
	movw %ax, %dx			/* selector 8, offset low */
	andl $0xffff0000, %eax
	orl $0x8e00, %eax		/* offset high, present 32-bit interrupt gate */
	movl $IDT, %edi
	movl $256, %ecx
4:	movl %edx, (%edi)
	movl %eax, 4(%edi)
	addl $8, %edi
	loop 4b
	lidt idtr
	movb $0x34, %al			/* channel 0, lo/hi byte, mode 2 */
	outb %al, $0x43
	movb $0x55, %al			/* 597 = 0x255: 2 kHz */
	outb %al, $0x40
	movb $0x02, %al
	outb %al, $0x40
	inb $0x21, %al
	andb $0xfe, %al
	outb %al, $0x21
	rdtsc
	movl %eax, DLLO
	movl %edx, DLHI

run:	movl $1, READY
	movl WSS, %edx
	testl %edx, %edx
	jz idle
	shll $20, %edx
	movl $BASE, %edi
	leal (%edi,%edx), %ebp
	movl $1, %ecx			/* pass 1: the pages stay non-zero */
pass:	movl %ecx, COUNTER
	movl %edi, %esi
page:	movl %ecx, (%esi)
	addl $4096, %esi
	testl $BATCH, %esi
	jnz next
	incl BATCHES
	cmpl $0, TPB
	je next
	/* A batch done: the next is due TPB ticks after this one was. */
	movl TPB, %eax
	addl %eax, DLLO
	adcl $0, DLHI
	rdtsc
	movl %eax, NOWLO
	movl %edx, NOWHI
	subl DLLO, %eax
	sbbl DLHI, %edx			/* now - deadline */
	js wait
	jnz behind			/* far behind */
	cmpl SLACK, %eax
	jbe next			/* a little late (a tick of the wait): go on */
behind:	movl NOWLO, %eax		/* more: start again from now */
	movl %eax, DLLO
	movl NOWHI, %eax
	movl %eax, DLHI
	jmp next
wait:	sti				/* hlt runs before any interrupt */
	hlt
	cli
	rdtsc
	subl DLLO, %eax
	sbbl DLHI, %edx
	js wait
next:	cmpl %ebp, %esi
	jb page
	incl %ecx
	jmp pass

idle:	hlt
	jmp idle

	/* Any interrupt: acknowledge it at both PICs. */
tick:	pushl %eax
	movb $0x20, %al
	outb %al, $0xa0
	outb %al, $0x20
	popl %eax
	iret

	.align 8
gdt:	.quad 0
	.quad 0x00cf9a000000ffff	/* 8: flat 32-bit code */
	.quad 0x00cf92000000ffff	/* 16: flat data */
	.word 0
gdtr:	.word 3*8-1
	.long gdt
	.word 0
idtr:	.word 256*8-1
	.long IDT
