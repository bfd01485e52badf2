#!/usr/bin/env python3
# Precision of the KDA chunked state pass products (numpy, no GPU): the 16-token chunked algorithm
# in fp32 with W S, Qt S and Kh^T D as 1xTF32, 3xTF32 or fp32 products, against the fp64
# per-token recurrence; relative RMS error of output and final state. The kernel choice is
# kTf32Passes in src/kda/engines/cuda/kda_chunked.cu. Usage: kda-tf32-precision.py T G_LO PERIOD
# (g ~ U(G_LO, 0) log decays; PERIOD > 0 repeats the first PERIOD (k, v) pairs: a learned state).
import numpy as np, sys
def tf32(x):
    x=np.asarray(x,np.float32); b=x.view(np.uint32).astype(np.uint64)
    b=((b+0x1000)&0xFFFFE000).astype(np.uint32)  # round half away (rna) to 10 mantissa bits
    return b.view(np.float32)
def prod(a,b,mode):
    a=a.astype(np.float32); b=b.astype(np.float32)
    if mode=='fp32': return a@b
    ah,bh=tf32(a),tf32(b)
    if mode=='1x': return ah@bh
    al,bl=tf32(a-ah),tf32(b-bh)
    return ah@bh+(al@bh+ah@bl)
def run(T,K,V,glo,ghi,period,seed):
    rng=np.random.default_rng(seed)
    k=rng.standard_normal((T,K)); q=rng.standard_normal((T,K)); v=rng.standard_normal((T,V))
    if period:
        k=np.tile(k[:period],(T//period+1,1))[:T]; v=np.tile(v[:period],(T//period+1,1))[:T]
    k/=np.linalg.norm(k,axis=1,keepdims=True); q/=np.linalg.norm(q,axis=1,keepdims=True)
    beta=1/(1+np.exp(-rng.standard_normal(T))); g=rng.uniform(glo,ghi,(T,K)); sc=K**-0.5
    S0=rng.standard_normal((K,V))*0.5
    # fp64 recurrence
    S=S0.copy(); Oref=np.zeros((T,V))
    for t in range(T):
        S=np.exp(g[t])[:,None]*S; S=S+beta[t]*np.outer(k[t],v[t]-S.T@k[t]); Oref[t]=sc*S.T@q[t]
    Sref=S
    res={}
    for mode in ('1x','3x','fp32'):
        S=S0.astype(np.float32); O=np.zeros((T,V))
        for c0 in range(0,T,16):
            C=min(16,T-c0); G=np.cumsum(g[c0:c0+C],0)
            kc,qc,vc,bc=k[c0:c0+C],q[c0:c0+C],v[c0:c0+C],beta[c0:c0+C]
            L=np.zeros((C,C)); A=np.zeros((C,C))
            for r in range(C):
                for s_ in range(r+1):
                    dec=np.exp(G[r]-G[s_]); 
                    if s_<r: L[r,s_]=bc[r]*np.sum(kc[r]*kc[s_]*dec)
                    A[r,s_]=sc*np.sum(qc[r]*kc[s_]*dec)
            Tm=np.linalg.inv(np.eye(C)+L)
            W=(Tm@(bc[:,None]*kc*np.exp(G))).astype(np.float32); U=(Tm@(bc[:,None]*vc)).astype(np.float32)
            Qt=(sc*qc*np.exp(G)).astype(np.float32); Kh=(kc*np.exp(G[-1]-G)).astype(np.float32)
            D=U-prod(W,S,mode); O[c0:c0+C]=prod(Qt,S,mode)+A.astype(np.float32)@D
            S=(np.exp(G[-1]).astype(np.float32)[:,None]*S+prod(Kh.T,D,mode)).astype(np.float32)
        rel=lambda a,b: np.sqrt(np.mean((a-b)**2)/np.mean(b**2))
        res[mode]=(rel(O,Oref),rel(S,Sref))
    print(f"T={T} g=[{glo},{ghi}] period={period}: "+"  ".join(f"{m}: out {o:.1e} state {s:.1e}" for m,(o,s) in res.items()))
run(int(sys.argv[1]),128,128,float(sys.argv[2]),0,int(sys.argv[3]),5)
