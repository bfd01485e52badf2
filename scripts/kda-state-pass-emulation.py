#!/usr/bin/env python3
# Index-level emulation (numpy, no GPU) of kda_chunk_state_kernel in src/kda/engines/cuda/kda_chunked.cu:
# one CTA, several chunk steps, every shared-memory offset, cp.async copy and m16n8k8 fragment
# index of the kernel written out per lane (shared memory starts NaN, so a read of an unwritten
# word shows), compared with D = U - W S, O = Qt S + Aqk D, S <- Diag(ec) S + Kh^T D in fp64.
# Keep it in step with the kernel when its indexing changes. Run: python3 scripts/kda-state-pass-emulation.py
# Index-level emulation of kda_chunk_state_kernel (one CTA, several chunk steps) against numpy.
import numpy as np
rng = np.random.default_rng(0)
def run(K, V, e0, nsteps, VT=16):
    C=16; W8=8
    kRowWQ=K+4; kRowKh=K+8; kRowS=VT+8; Q=4; NT=VT//8; COLS=C*VT//256
    kW=0; kQt=kW+C*kRowWQ; kKh=kQt+C*kRowWQ; kU=kKh+C*kRowKh; kA=kU+C*VT; kEc=kA+C*C; kStage=kEc+K
    kS=2*kStage; kP=kS+K*kRowS; kD=kP+2*Q*C*kRowS; kDm=kD+C*kRowS; kF=kDm+C*kRowS
    TPW=K//16*NT//8; assert 1<=TPW<=NT and NT%TPW==0
    # global block layout
    lw=0; lqt=lw+C*K; lkh=lqt+C*K; lu=lkh+C*K; laqk=lu+C*V; lec=laqk+C*C; bf=lec+K
    blocks=[]
    for j in range(nsteps):
        b=np.zeros(bf)
        b[lw:lw+C*K]=rng.standard_normal(C*K); b[lqt:lqt+C*K]=rng.standard_normal(C*K)
        b[lkh:lkh+C*K]=rng.standard_normal(C*K); b[lu:lu+C*V]=rng.standard_normal(C*V)
        b[laqk:laqk+C*C]=np.tril(rng.standard_normal((C,C))).ravel(); b[lec:lec+K]=rng.uniform(0,1,K)
        blocks.append(b)
    S0=rng.standard_normal((K,VT))
    # reference
    S=S0.copy(); Oref=[]
    for b in blocks:
        W=b[lw:lw+C*K].reshape(C,K); Qt=b[lqt:lqt+C*K].reshape(C,K); Kh=b[lkh:lkh+C*K].reshape(C,K)
        U=b[lu:lu+C*V].reshape(C,V)[:,e0:e0+VT]; A=b[laqk:laqk+C*C].reshape(C,C); ec=b[lec:lec+K]
        D=U-W@S; O=Qt@S+np.tril(A)@D; S=ec[:,None]*S+Kh.T@D; Oref.append(O)
    # emulation
    sm=np.full(kF,np.nan)
    def load_stage(base,b):
        kQuads=K//4
        kPieces=C*kQuads; assert kPieces%256==0
        for tid in range(256):
            for it in range(kPieces//256):
                i=tid+it*256; r=i//kQuads; c4=i%kQuads*4
                sm[base+kW+r*kRowWQ+c4:base+kW+r*kRowWQ+c4+4]=b[lw+r*K+c4:lw+r*K+c4+4]
                sm[base+kQt+r*kRowWQ+c4:base+kQt+r*kRowWQ+c4+4]=b[lqt+r*K+c4:lqt+r*K+c4+4]
                sm[base+kKh+r*kRowKh+c4:base+kKh+r*kRowKh+c4+4]=b[lkh+r*K+c4:lkh+r*K+c4+4]
            nU=C*VT//4; nA=C*C//4; assert nU+nA+K//4<=256
            if tid < nU:
                r=tid//(VT//4); c4=tid%(VT//4)*4
                sm[base+kU+r*VT+c4:base+kU+r*VT+c4+4]=b[lu+r*V+e0+c4:lu+r*V+e0+c4+4]
            elif tid < nU+nA:
                i=(tid-nU)*4; sm[base+kA+i:base+kA+i+4]=b[laqk+i:laqk+i+4]
            elif tid < nU+nA+K//4:
                i=(tid-nU-nA)*4; sm[base+kEc+i:base+kEc+i+4]=b[lec+i:lec+i+4]
    def mma(a,b,c):  # a[32][4], b[32][2], c[32][4]
        A=np.zeros((16,8));B=np.zeros((8,8));Cm=np.zeros((16,8))
        for l in range(32):
            g,t=l//4,l%4
            A[g,t],A[g+8,t],A[g,t+4],A[g+8,t+4]=a[l]; B[t,g],B[t+4,g]=b[l]
            Cm[g,2*t],Cm[g,2*t+1],Cm[g+8,2*t],Cm[g+8,2*t+1]=c[l]
        Dm=A@B+Cm
        return [[Dm[l//4,2*(l%4)],Dm[l//4,2*(l%4)+1],Dm[l//4+8,2*(l%4)],Dm[l//4+8,2*(l%4)+1]] for l in range(32)]
    load_stage(0,blocks[0])
    for d in range(K):
        for ee in range(VT): sm[kS+d*kRowS+ee]=S0[d,ee]
    sreg=[[None]*TPW for _ in range(8)]
    for w in range(8):
        for jj in range(TPW):
            sreg[w][jj]=[]
            for l in range(32):
                g,t=l//4,l%4; i=w*TPW+jj; d=i//NT*16+g; c=i%NT*8+2*t
                sreg[w][jj].append([sm[kS+d*kRowS+c],sm[kS+d*kRowS+c+1],sm[kS+(d+8)*kRowS+c],sm[kS+(d+8)*kRowS+c+1]])
    Oemu=[]
    for j in range(nsteps):
        st=(j&1)*kStage
        if j+1<nsteps: load_stage(((j+1)&1)*kStage,blocks[j+1])
        for w in range(8):
            prod=w//Q; kq=w%Q; Ab=st+(kW if prod==0 else kQt)
            acc=[[[0.0]*4 for _ in range(32)] for _ in range(NT)]
            for kk in range(0,K//Q,8):
                k0=kq*(K//Q)+kk
                a=[[sm[Ab+g*kRowWQ+k0+t],sm[Ab+(g+8)*kRowWQ+k0+t],sm[Ab+g*kRowWQ+k0+t+4],sm[Ab+(g+8)*kRowWQ+k0+t+4]] for l in range(32) for g,t in [(l//4,l%4)]]
                for nt in range(NT):
                    b=[[sm[kS+(k0+t)*kRowS+nt*8+g],sm[kS+(k0+t+4)*kRowS+nt*8+g]] for l in range(32) for g,t in [(l//4,l%4)]]
                    acc[nt]=mma(a,b,acc[nt])
            out=kP+(prod*Q+kq)*C*kRowS
            for nt in range(NT):
                for l in range(32):
                    g,t=l//4,l%4
                    sm[out+2*t+g*kRowS+nt*8:out+2*t+g*kRowS+nt*8+2]=acc[nt][l][0:2]
                    sm[out+2*t+(g+8)*kRowS+nt*8:out+2*t+(g+8)*kRowS+nt*8+2]=acc[nt][l][2:4]
        O=np.zeros((C,VT)); qsv=np.zeros((C,VT))
        part=C*kRowS
        for tid in range(256):
            for cc in range(COLS):
                r,e=tid//16,tid%16+16*cc; at=r*kRowS+e
                ws=sum(sm[kP+kq*part+at] for kq in range(Q)); qs=sum(sm[kP+(Q+kq)*part+at] for kq in range(Q))
                sm[kD+at]=sm[st+kU+r*VT+e]-ws; sm[kDm+at]=sm[kD+at]; qsv[r,e]=qs  # Dm: the mma operand copy
        for tid in range(256):
            for cc in range(COLS):
                r,e=tid//16,tid%16+16*cc; o=qsv[r,e]
                for k in range(r+1): o+=sm[st+kA+r*C+k]*sm[kD+k*kRowS+e]
                O[r,e]=o
        Oemu.append(O)
        for w in range(8):
            i0=w*TPW; m0=i0//NT*16; kh=st+kKh
            accs=[]
            for jj in range(TPW):
                accs.append([[sm[st+kEc+m0+l//4]*sreg[w][jj][l][0],sm[st+kEc+m0+l//4]*sreg[w][jj][l][1],sm[st+kEc+m0+l//4+8]*sreg[w][jj][l][2],sm[st+kEc+m0+l//4+8]*sreg[w][jj][l][3]] for l in range(32)])
            for k0 in (0,8):
                a=[[sm[kh+(k0+t)*kRowKh+m0+g],sm[kh+(k0+t)*kRowKh+m0+g+8],sm[kh+(k0+t+4)*kRowKh+m0+g],sm[kh+(k0+t+4)*kRowKh+m0+g+8]] for l in range(32) for g,t in [(l//4,l%4)]]
                for jj in range(TPW):
                    nt=(i0+jj)%NT
                    b=[[sm[kDm+(k0+t)*kRowS+nt*8+g],sm[kDm+(k0+t+4)*kRowS+nt*8+g]] for l in range(32) for g,t in [(l//4,l%4)]]
                    accs[jj]=mma(a,b,accs[jj])
            for jj in range(TPW):
                nt=(i0+jj)%NT; sreg[w][jj]=accs[jj]
                for l in range(32):
                    g,t=l//4,l%4; srow=kS+(m0+g)*kRowS+nt*8+2*t
                    sm[srow:srow+2]=accs[jj][l][0:2]; sm[srow+8*kRowS:srow+8*kRowS+2]=accs[jj][l][2:4]
    # The final state comes from the register tiles (the kernel's mirror holds tf32-rounded operands).
    Semu=np.full((K,VT),np.nan)
    for w in range(8):
        for jj in range(TPW):
            i=w*TPW+jj
            for l in range(32):
                g,t=l//4,l%4; d=i//NT*16+g; c=i%NT*8+2*t
                Semu[d,c],Semu[d,c+1],Semu[d+8,c],Semu[d+8,c+1]=sreg[w][jj][l]
    eo=max(np.abs(a-b).max()/np.abs(a).max() for a,b in zip(Oref,Oemu)); es=np.abs(S-Semu).max()/np.abs(S).max()
    print(K,V,"VT",VT,e0,nsteps,"out err",eo,"state err",es)
run(128,128,32,3); run(64,64,48,3); run(64,128,112,2); run(128,64,0,2)
run(128,128,64,3,VT=32); run(64,64,32,3,VT=32); run(64,128,96,2,VT=32); run(128,64,0,2,VT=32)
