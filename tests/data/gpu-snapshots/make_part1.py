import torch,os,sys
O=os.environ['OUT'];m=torch.cuda.memory;C='cuda'
print(torch.__version__,torch.cuda.get_device_name())
def dump(n):m._dump_snapshot(f'{O}/{n}.pickle');m._record_memory_history(enabled=None);print('ok',n)
pre=torch.empty(3*2**20+5,dtype=torch.uint8,device=C)
m._record_memory_history(max_entries=100000)
s=torch.cuda.Stream();x=[torch.empty(2**20*(i+1)+3,dtype=torch.uint8,device=C) for i in range(8)]
with torch.cuda.stream(s):
  torch.cuda._sleep(2*10**9)
  for t in x[:4]:t.record_stream(s)
del x;y=torch.empty(2**24,device=C);dump('pending')
torch.cuda.synchronize();del y
m._record_memory_history(max_entries=50)
a=[torch.randn(1000+i*37,device=C) for i in range(100)];del a[::2];dump('ring50')
m._record_memory_history(context='all',stacks='all')
l=torch.nn.Linear(512,512).to(C);o=torch.optim.Adam(l.parameters())
for _ in range(3):
  l(torch.randn(64,512,device=C)).sum().backward();o.step();o.zero_grad()
dump('ctx_all')
m._record_memory_history(stacks='python')
b=[torch.empty(2**22,device=C) for _ in range(3)];del b[1];dump('stacks_python')
m._record_memory_history()
try:z=torch.empty(2**48,dtype=torch.uint8,device=C)
except Exception as e:print('oom',type(e).__name__)
dump('oom')
m._record_memory_history()
for i in range(4):
  t=torch.empty(2**28+i,dtype=torch.uint8,device=C);del t;torch.cuda.empty_cache()
dump('emptycache')
del a,l,o
torch.cuda.empty_cache()
try:
  m._set_allocator_settings('expandable_segments:True')
  m._record_memory_history()
  e=[torch.empty(2**20*(7*i%13+1),dtype=torch.uint8,device=C) for i in range(40)]
  del e[::3];torch.cuda.empty_cache();f=[torch.empty(2**25,device=C) for _ in range(3)]
  dump('expandable')
except Exception as ex:print('exp fail',ex)
