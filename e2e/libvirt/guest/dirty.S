/*
 * A tiny guest whose memory dirty rate the test sets: a multiboot kernel
 * (QEMU's -kernel loads it in 32-bit protected mode, no firmware boot) that
 * rewrites one word in every 4 KiB page of a working set, forever. The
 * kernel command line is the working set in MiB; 0 halts (an idle guest).
 * QEMU passes the image's file name first: the number is the last word.
 * Build: as --32 -o dirty.o dirty.S && ld -m elf_i386 -Ttext=0x100000 -o dirty.elf dirty.o
 */
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
	xorl %edx, %edx			/* working set, MiB */
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
1:	movzbl (%esi), %eax
	subl $'0', %eax
	cmpl $9, %eax
	ja 2f
	imull $10, %edx
	addl %eax, %edx
	incl %esi
	jmp 1b
2:	testl %edx, %edx
	jz idle
	shll $20, %edx
	movl $0x1000000, %edi		/* from 16 MiB up: clear of this image */
	leal (%edi,%edx), %ebp
	xorl %ecx, %ecx
3:	movl %edi, %eax
4:	movl %ecx, (%eax)
	addl $4096, %eax
	cmpl %ebp, %eax
	jb 4b
	incl %ecx
	jmp 3b
idle:	hlt
	jmp idle
