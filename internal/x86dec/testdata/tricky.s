	.text
	.globl f
	.type f,@function
f:
	endbr64
	endbr32
	cs nopw 0x0(%rax,%rax,1)
	.byte 0x66,0x66,0x2e,0x0f,0x1f,0x84,0,0,0,0,0
	nopl 0x0(%rax)
	lock addl $1,(%rax)
	lock cmpxchg %rcx,(%rdx)
	lock xaddq %rax,8(%rbx)
	lock cmpxchg16b (%rsi)
	rep movsb
	repnz scasb
	mov %fs:0x28,%rax
	mov %gs:(%rax),%rax
	addr32 mov (%eax),%eax
	notrack jmp *%rax
	bnd jmp *%rax
	bnd ret
	rep ret
	movabs $0x1122334455667788,%rax
	movabs $0x1122334455667788,%r8
	movabs 0x1122334455667788,%al
	movabs 0x1122334455667788,%eax
	movabs %rax,0x1122334455667788
	.byte 0x67,0xa1,1,2,3,4
	.byte 0x67,0xa0,1,2,3,4
	enter $0x10,$1
	leave
	ret $8
	lretq
	lretq $8
	iretq
	iretl
	int $0x80
	int3
	int1
	hlt
	ud2
	ud1 (%rax),%eax
	ud0 (%rax),%eax
	test $1,%al
	test $0x12345678,%eax
	test $0x1234,%ax
	testb $1,(%rax)
	testw $1,(%rax)
	testl $1,(%rax)
	testq $1,0x10(%rax)
	.byte 0xf6,0xc8,0x01
	.byte 0xf7,0xc8,1,2,3,4
	notl (%rax)
	negq %rax
	mulb (%rax)
	divl %ecx
	idivq 0x12345678(%rax,%rbx,8)
	imul $3,%eax,%ecx
	imul $300,%eax,%ecx
	imul $300,%ax,%cx
	push $1
	push $0x12345678
	pushw $0x1234
	mov $0x1234,%ax
	mov $0x12345678,%eax
	mov $-1,%rax
	mov $1,%r8w
	movw $0x1234,(%rax)
	movb $1,(%rax)
	movq $1,0x1000(%rip)
	addw $0x1234,0x10(%rip)
	add $0x1234,%ax
	add $0x12,%al
	add $0x12345678,%rax
	cmpb $1,0x1(%rip)
	shl $3,%eax
	shl %cl,%eax
	shl %eax
	roll $3,(%rax)
	cltq
	cqto
	cwtl
	xlat
	cmc
	clc
	cld
	std
	cli
	sti
	pushf
	popf
	sahf
	lahf
	movslq %eax,%rcx
	lea 0x100(%rip),%rax
	lea 0x0(,%rax,4),%rax
	mov 0x0(,%rax,4),%eax
	mov (%rbp),%eax
	mov (%r13),%eax
	mov (%r12),%eax
	mov (%rsp),%eax
	mov 0x12345678(%rsp),%eax
	mov 0x12345678,%eax
	.byte 0x66,0x48,0xe9,0,0,0,0
	.byte 0x66,0x66,0x48,0xe8,0,0,0,0
	jmp *%rax
	jmp *(%rax)
	call *0x10(%rip)
	jmp *0x10(%rip)
	call *%rax
	ljmp *(%rax)
	lcall *(%rax)
	rex.W ljmp *(%rax)
	push %fs
	pop %fs
	push %gs
	pop %gs
	mov %eax,%ss
	mov %eax,%ds
	mov %ds,%eax
	in $0x80,%al
	in $0x80,%eax
	out %al,$0x80
	in (%dx),%al
	out %eax,(%dx)
	insb
	outsl
	syscall
	sysenter
	sysretq
	sysexitl
	cpuid
	rdtsc
	rdtscp
	rdpmc
	rdrand %eax
	rdseed %eax
	rdseed %rax
	rdpid %rax
	rdpkru
	wrpkru
	xgetbv
	xsetbv
	pause
	lfence
	mfence
	sfence
	clflush (%rax)
	clflushopt (%rax)
	clwb (%rax)
	prefetcht0 (%rax)
	prefetchnta 0x10(%rip)
	prefetchw (%rax)
	prefetch (%rax)
	bt $3,%eax
	btsl $3,(%rax)
	btl %eax,(%rcx)
	shld $3,%eax,%ecx
	shrd %cl,%eax,%ecx
	cmpxchg8b (%rax)
	xadd %eax,%ecx
	bswap %eax
	bswap %r9
	movbe (%rax),%eax
	crc32b %al,%eax
	crc32q (%rax),%rax
	popcnt %eax,%ecx
	lzcnt %eax,%ecx
	tzcnt %eax,%ecx
	adcx %eax,%ecx
	adox %rax,%rcx
	adcx (%rax),%rcx
	adox 0x10(%rip),%ecx
	pshufd $1,%xmm0,%xmm1
	pshufw $1,%mm0,%mm1
	psrlw $1,%xmm0
	psrlq $1,%mm0
	pinsrw $1,%eax,%xmm0
	pextrw $1,%xmm0,%eax
	shufps $1,%xmm0,%xmm1
	cmpps $1,%xmm0,%xmm1
	cmpsd $1,0x10(%rip),%xmm1
	palignr $3,%xmm0,%xmm1
	pblendw $3,0x10(%rip),%xmm1
	roundss $1,%xmm0,%xmm1
	pextrb $1,%xmm0,%eax
	pshufb 0x10(%rip),%xmm0
	pmaddubsw %mm0,%mm1
	aesenc %xmm0,%xmm1
	aeskeygenassist $1,%xmm0,%xmm1
	pclmulqdq $1,%xmm0,%xmm1
	sha1rnds4 $1,%xmm0,%xmm1
	sha256rnds2 %xmm0,%xmm1
	gf2p8affineqb $1,%xmm0,%xmm1
	extrq $1,$2,%xmm0
	insertq $1,$2,%xmm1,%xmm0
	extrq %xmm1,%xmm0
	insertq %xmm1,%xmm0
	movntss %xmm0,(%rax)
	movnti %eax,(%rax)
	movq %xmm0,%rax
	movd %eax,%mm0
	cvtsi2sdq 0x10(%rip),%xmm0
	pfadd %mm1,%mm0
	pfmul 0x10(%rax),%mm0
	pfrcp 0x10(%rip),%mm0
	pavgusb %mm1,%mm0
	femms
	emms
	fxsave (%rax)
	fxrstor64 (%rax)
	xsave (%rax)
	xsaveopt (%rax)
	xrstor (%rax)
	xsavec (%rax)
	rdfsbase %rax
	wrgsbase %rax
	incsspq %rax
	rdsspq %rax
	wrssq %rax,(%rcx)
	wrussq %rax,(%rcx)
	setssbsy
	saveprevssp
	rstorssp (%rax)
	clrssbsy (%rax)
	swapgs
	mov %cr0,%rax
	mov %rax,%cr3
	mov %cr8,%rax
	mov %dr7,%rax
	wrmsr
	rdmsr
	invlpg (%rax)
	lgdt (%rax)
	sgdt (%rax)
	smsw %eax
	str %eax
	sldt %eax
	lldt %ax
	ltr %ax
	verr %ax
	lar %ax,%ax
	lsl %eax,%eax
	clts
	invd
	wbinvd
	wbnoinvd
	vmcall
	vmlaunch
	vmxoff
	vmread %rax,%rcx
	vmwrite %rax,%rcx
	vmptrld (%rax)
	vmclear (%rax)
	vmxon (%rax)
	vmptrst (%rax)
	invept (%rax),%rax
	invpcid (%rax),%rax
	monitor
	mwait
	clac
	stac
	rsm
	getsec
	serialize
	xend
	xtest
	xabort $1
	clzero
	monitorx
	mwaitx
	rdpru
	movdiri %eax,(%rcx)
	movdir64b (%rax),%rcx
	enqcmd (%rax),%rcx
	enqcmds (%rax),%rcx
	tpause %eax
	umonitor %rax
	umwait %eax
	cldemote (%rax)
	ptwrite %eax
	uiret
	testui
	clui
	stui
	senduipi %rax
	hreset $1
	flds (%rax)
	fstpt (%rax)
	fnstcw (%rax)
	fldz
	fxch %st(1)
	faddp
	fisttpll (%rax)
	fucomip %st(1),%st
	vzeroupper
	vzeroall
	.byte 0xc4,0xe1,0x78,0x77
	.byte 0xc4,0xe1,0x7c,0x77
	vmovdqa 0x100(%rip),%xmm0
	vmovdqu %ymm0,0x100(%rip)
	vpshufd $1,%ymm0,%ymm1
	vpsrlw $1,%xmm0,%xmm1
	vpslldq $1,%ymm0,%ymm1
	vpinsrw $1,%eax,%xmm0,%xmm1
	vpextrw $1,%xmm0,%eax
	vshufps $1,%ymm0,%ymm1,%ymm2
	vcmpps $1,%ymm0,%ymm1,%ymm2
	vcmpsd $1,0x10(%rip),%xmm1,%xmm2
	vpalignr $1,%ymm0,%ymm1,%ymm2
	vblendvps %ymm3,%ymm0,%ymm1,%ymm2
	vpblendvb %xmm3,0x10(%rip),%xmm1,%xmm2
	vfmadd231ps %ymm0,%ymm1,%ymm2
	vfmadd231sd 0x10(%rip),%xmm1,%xmm2
	vpermq $1,%ymm0,%ymm1
	vpermq $1,0x10(%rip),%ymm1
	vgatherdps %ymm3,(%rax,%ymm1,4),%ymm2
	vpgatherqq %ymm3,0x10(%rax,%ymm1,8),%ymm2
	andn %eax,%ecx,%edx
	bextr %eax,%ecx,%edx
	bzhi %rax,0x10(%rip),%rdx
	pdep %eax,%ecx,%edx
	pext %eax,%ecx,%edx
	rorx $3,%eax,%ecx
	rorx $3,0x10(%rip),%rcx
	sarx %eax,%ecx,%edx
	shlx %rax,%rcx,%rdx
	mulx %eax,%ecx,%edx
	blsr %eax,%ecx
	vbroadcastss 0x10(%rip),%ymm0
	vpbroadcastd %xmm0,%ymm1
	vcvtph2ps %xmm0,%ymm1
	vcvtps2ph $1,%ymm0,0x10(%rip)
	vextracti128 $1,%ymm0,0x10(%rip)
	vinserti128 $1,0x10(%rip),%ymm1,%ymm2
	vperm2i128 $1,%ymm0,%ymm1,%ymm2
	vpclmulqdq $1,%ymm0,%ymm1,%ymm2
	vaesenc %ymm0,%ymm1,%ymm2
	vldmxcsr 0x10(%rip)
	vmovd %eax,%xmm0
	vmovq 0x10(%rip),%xmm0
	vpmovmskb %ymm0,%eax
	vptest %ymm0,%ymm1
	kmovw %k1,%eax
	kmovq %k1,%k2
	kandw %k1,%k2,%k3
	kshiftlw $3,%k1,%k2
	.byte 0x64,0xc5,0xf9,0x6f,0x05,1,2,3,4
	.byte 0x2e,0xc4,0xe2,0x79,0x18,0x05,1,2,3,4
	.byte 0x3e,0x62,0xf1,0x7d,0x48,0x6f,0x05,1,2,3,4
	.byte 0x65,0x62,0xf1,0x7d,0x48,0x6f,0x40,0x01
	vfmaddps %xmm3,%xmm0,%xmm1,%xmm2
	vfmaddsd 0x10(%rip),%xmm0,%xmm1,%xmm2
	vmovdqa32 0x100(%rip),%zmm0
	vmovdqu64 %zmm0,0x100(%rip)
	vpaddd 0x40(%rax),%zmm1,%zmm2
	vpaddd 0x44(%rax),%zmm1,%zmm2
	vpaddd 0x10(%rip){1to16},%zmm1,%zmm2
	vpternlogd $0x96,%zmm0,%zmm1,%zmm2
	vpternlogq $0x96,0x10(%rip),%zmm1,%zmm2{%k1}{z}
	vcmpps $1,%zmm0,%zmm1,%k2
	vpcmpd $1,%zmm0,%zmm1,%k2
	vpcmpub $1,0x10(%rip),%zmm1,%k2{%k3}
	vpshufd $1,%zmm0,%zmm1
	vpsrlw $1,%zmm0,%zmm1
	vpsrld $1,0x40(%rax),%zmm1
	vpslldq $1,%zmm0,%zmm1
	vfpclassps $1,%zmm0,%k1
	vaddps {rn-sae},%zmm0,%zmm1,%zmm2
	vcvtps2ph $1,{sae},%zmm0,%ymm1
	vgatherdps 0x10(%rax,%zmm1,4),%zmm2{%k1}
	vpermt2d %zmm0,%zmm1,%zmm2
	vpbroadcastd %eax,%zmm1
	vextracti32x4 $1,%zmm0,0x10(%rip)
	vinserti64x4 $1,0x10(%rip),%zmm1,%zmm2
	vpinsrw $1,%eax,%xmm20,%xmm21
	vpextrw $1,%xmm20,%eax
	vmovdqu8 %xmm20,%xmm21
	vpcompressd %zmm0,0x10(%rip){%k1}
	vaddph %zmm1,%zmm2,%zmm3
	vaddph 0x10(%rip),%zmm2,%zmm3
	vfmadd231ph %zmm1,%zmm2,%zmm3
	vcmpph $1,%zmm1,%zmm2,%k1
	vfpclassph $1,%zmm1,%k1
	vrcpph 0x10(%rip),%zmm2
	vpdpbusd %zmm0,%zmm1,%zmm2
	vpdpbusd %ymm0,%ymm1,%ymm2
	vpshldd $3,%zmm0,%zmm1,%zmm2
	vgf2p8affineqb $1,%zmm0,%zmm1,%zmm2
	vp2intersectd %zmm0,%zmm1,%k2
	vpcmov %xmm3,%xmm0,%xmm1,%xmm2
	vpcmov 0x10(%rip),%ymm0,%ymm1,%ymm2
	vprotb $3,%xmm0,%xmm1
	vprotb %xmm0,%xmm1,%xmm2
	vpshlb %xmm0,%xmm1,%xmm2
	vpshaq %xmm0,0x10(%rip),%xmm2
	vfrczps %xmm0,%xmm1
	vfrczsd 0x10(%rip),%xmm1
	vphaddbd %xmm0,%xmm1
	vphsubdq %xmm0,%xmm1
	vpcomb $1,%xmm0,%xmm1,%xmm2
	vpcomuq $1,0x10(%rip),%xmm1,%xmm2
	vpperm %xmm3,%xmm0,%xmm1,%xmm2
	vpmacsdd %xmm3,%xmm0,%xmm1,%xmm2
	vpmadcswd %xmm3,%xmm0,%xmm1,%xmm2
	bextr $0x1234,%eax,%ecx
	bextr $0x1234,0x10(%rip),%rcx
	blcfill %eax,%ecx
	blci 0x10(%rip),%rcx
	blcmsk %eax,%ecx
	t1mskc %eax,%ecx
	lwpins $0x1234,%eax,%ecx
	lwpval $0x1234,0x10(%rip),%rcx
	llwpcb %rax
	slwpcb %rax
	ldtilecfg (%rax)
	sttilecfg 0x10(%rip)
	tileloadd (%rax,%rbx,1),%tmm1
	tdpbssd %tmm1,%tmm2,%tmm3
	tilezero %tmm1
	tilerelease
	jmp 1f
	jmp 2f
	je 1f
	jne 2f
	loop 1f
	loope 1f
	loopne 1f
	jrcxz 1f
	jecxz 1f
	call 1f
	xbegin 1f
1:	nop
	.fill 200,1,0x90
2:	nop
	jmp 1b
	jg 1b
	ja 2b
	.size f,.-f
