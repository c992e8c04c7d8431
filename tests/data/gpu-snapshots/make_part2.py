import torch,os
O=os.environ['OUT'];m=torch.cuda.memory;C='cuda';E=torch.empty
def d(n):m._dump_snapshot(f'{O}/{n}.pickle');print('ok',n)
def off():m._record_memory_history(enabled=None)
m._record_memory_history()
x=[E(2**21*(i+1)+7,dtype=torch.uint8,device=C) for i in range(4)]
off()
del x;y=[E(2**21*(i+1)+9,dtype=torch.uint8,device=C) for i in range(4)];d('stopped_then_changed')
del y
m._record_memory_history()
g=torch.cuda.CUDAGraph();a=torch.randn(1024,1024,device=C)
s=torch.cuda.Stream();s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
  for _ in range(2):b=a@a;c=b.relu()
torch.cuda.current_stream().wait_stream(s)
with torch.cuda.graph(g):
  b=a@a;c=(b.relu()*2).sum(0)
g.replay();torch.cuda.synchronize();d('cudagraph');off()
del g,b,c;torch.cuda.empty_cache()
m._record_memory_history(context=None,stacks='python')
z=[E(10**6+i,device=C) for i in range(20)];del z[::2];d('context_none');off()
m._record_memory_history()
s2=torch.cuda.Stream()
with torch.cuda.stream(s2):
  w=[E(3*10**6+i,device=C) for i in range(10)];del w[::3]
d('side_stream');off()
m._record_memory_history(max_entries=7)
s3=torch.cuda.Stream();q=[E(2**22+i,dtype=torch.uint8,device=C) for i in range(6)]
with torch.cuda.stream(s3):
  torch.cuda._sleep(10**9);[t.record_stream(s3) for t in q]
del q;r=E(5,device=C);d('ring7_pending');off()
torch.cuda.synchronize();del r,z,w
torch.cuda.empty_cache()
m._set_allocator_settings('expandable_segments:True')
m._record_memory_history()
v=[E(2**20*(5*i%11+1),dtype=torch.uint8,device=C) for i in range(60)]
del v[::2];torch.cuda.empty_cache()
try:u=E(2**47,dtype=torch.uint8,device=C)
except Exception as e:print('oom')
v+=[E(2**24,device=C) for _ in range(4)];del v[:10];torch.cuda.empty_cache();d('expandable_oom_unmap')
