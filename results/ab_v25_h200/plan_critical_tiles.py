"""Critical tiles per CTA under the v24 plan and the v25 plan (a model of plan_work_item on 132 SMs, one CTA
per SM), against the time ratio v25 / v24 measured in round 1; then the shapes whose critical CTA holds more
tiles than an even spread of all tiles over the CTAs would give. Run from the repository root; output in
plan_critical_tiles.txt. A CTA's tiles: its 64-key prefix tiles, plus 1 when it takes the draft tail."""
import json, math, statistics as st
def ru(x,m): return (x+m-1)//m*m
def plan(Ps, G, tail_keys):
    W=[p+tail_keys for p in Ps]
    total=sum(W); chunk=max(ru(-(-total//G),64),128)
    for _ in range(64):
        cnt=sum(-(-w//chunk) if w>0 else 1 for w in W)
        if cnt<=G or cnt==len(Ps) or chunk>=1<<30: break
        nxt=ru(chunk*cnt//G,64); chunk=nxt if nxt>chunk else chunk+64
    share=64
    for w in W:
        n=max(1,-(-w//chunk)); share=max(share,ru(-(-w//n),64))
    chunk=max(min(share,chunk),128)
    crit=0; splits=0
    for p,w in zip(Ps,W):
        n=max(1,-(-w//chunk)); splits+=n
        for k in range(n):
            kb=min(k*chunk,p); ke=min(k*chunk+chunk,p)
            tiles=-(-(ke-kb)//64)+(1 if k==n-1 else 0)
            crit=max(crit,tiles)
    return crit,splits,chunk
def rows(p): return {(r['H'],r['T'],r['batch'],r['prefix'],r['mask']):r for r in json.load(open(p))['rows'] if r.get('ours_us')}
a=rows('results/ab_v25_h200/r1_v24_bench.json'); c=rows('results/ab_v25_h200/r1_v25b_bench.json')
same=[];fewer=[];more=[]
for k in sorted(a):
    H,T,B,P,_=k; rt=-(-H*T//64); G=max(1,132//rt)
    o=plan([P]*B,G,0); n=plan([P]*B,G,64)
    r=c[k]['ours_us']/a[k]['ours_us']
    (same if n[0]==o[0] else fewer if n[0]<o[0] else more).append(r)
    if k[4]=='tree' and n[0]!=o[0]: print(k[:4],'old',o,'new',n,round(r,3))
for nm,l in (('same crit',same),('fewer',fewer),('more',more)):
    if l: print(nm,len(l),round(st.median(l),3),round(min(l),3),round(max(l),3))
print('--- gap to ideal')
gaps=[]
for k in sorted(a):
    H,T,B,P,m=k
    if m!='tree': continue
    rt=-(-H*T//64); G=max(1,132//rt)
    n=plan([P]*B,G,64)
    tiles=B*(P//64+1)
    ideal=max(-(-tiles//G), 1)
    if n[0]>ideal: print(k[:4],'crit',n[0],'ideal',ideal,'G',G,'splits',n[1], round(c[k]['ours_us'],1))
