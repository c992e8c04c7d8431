"""The trace's codes (phases, memory categories, collectives, element types) as the C++ recorder
names them, and its clock and allocation-label calls, which every hook makes."""
import torch

from memcomm import _memcomm

PHASE = _memcomm.phase_names()
CATEGORY = _memcomm.category_names()
OP = _memcomm.coll_op_names()
_DTYPE = _memcomm.dtype_names()
STEP, FORWARD, BACKWARD, OPTIMIZER, DATA_WAIT, COMM = (
    PHASE["step"], PHASE["forward"], PHASE["backward"], PHASE["optimizer"], PHASE["data_wait"], PHASE["comm"])
KEEP = -1  # phase_begin/phase_end: leave the memory label as it is
ACTIVATION, OPT_STATE, INPUT, COMM_BUFFER = (
    CATEGORY["activation"], CATEGORY["optimizer_state"], CATEGORY["input"], CATEGORY["comm_buffer"])
_TORCH_DTYPE = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
                torch.int8: "i8", torch.uint8: "u8", torch.int32: "i32", torch.int64: "i64"}

now = _memcomm.now_ns                        # the recorder's clock, in ns
exchange = _memcomm.exchange_category        # sets this thread's allocation label, returns the previous one


def dtype_code(dtype: torch.dtype) -> int:
    """The trace's code of a tensor element type (0, "unknown", for types it has no name for)."""
    return _DTYPE.get(_TORCH_DTYPE.get(dtype, "unknown"), 0)
