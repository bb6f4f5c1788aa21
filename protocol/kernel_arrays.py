"""An array a compiled kernel hands its inner steps without counting references to it.

numba counts the references to an array passed from one compiled function to another: every
call adds one and takes one away again (`NRT_incref`, `NRT_decref`), each an atomic add on
the array's memory record. A kernel that calls a small step per token pays that at every
call, for every array it passes. In the Qlik JSON reader (`podd_cdc.qlik_batch_kernel`),
which calls a step per key, string and separator, `perf` put most of the kernel's time in
those two functions.

`unowned(array)` is a view of `array`'s memory with no memory record (as `numba.carray`
and `numba.farray` make of a pointer), so numba counts nothing when it is passed on. It is
valid only while `array` is: an entry point makes it of its own arguments, which the caller
holds for the whole call, and hands it to the steps it calls, never out of the call. An
array that is not contiguous (a strided view) is handed on as it is, counted.

Even an array with no memory record costs a step call more than its index: numba passes an
array as its whole structure (seven words) and still calls `NRT_incref` and `NRT_decref` on
it, which return at once. `pointer(array)` is the address of a contiguous array's first
element, which a step indexes (`p[i]`, `p[i] = v`) as it would the array, with nothing
passed but the address and nothing counted. It has no shape and no wrapping of negative
indexes: it is for a step that is given its bounds and only indexes within them, as the JSON
readers' steps are (`podd_cdc.json_scan`), where it took a third off the Qlik kernel.
"""

from __future__ import annotations

from typing import Any

from numba.core import types
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload
from numba.np.numpy_support import carray, farray


def _pointer_to_first(typingctx: Any, array: Any) -> Any:
    """A pointer to the first element of contiguous `array` (numba's intrinsic `_data`)."""
    if not isinstance(array, types.Array) or array.layout not in "CF":
        raise TypingError(f"unowned: a contiguous array, not {array}")
    pointer: Any = types.CPointer
    signature = pointer(array.dtype)(array)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return context.make_array(sig.args[0])(context, builder, args[0]).data

    return signature, codegen


_data: Any = intrinsic(_pointer_to_first)


def unowned(array: Any) -> Any:
    """`array`'s memory as an array numba counts no reference to (see the module); called
    from Python (numba's JIT off: the cachegrind counts run so), the array itself."""
    return array


@overload(unowned, inline="always")
def _unowned(array: Any) -> Any:
    def counted(array: Any) -> Any:
        return array  # not contiguous (a strided view): handed on as it is

    def rows(array: Any) -> Any:
        return carray(_data(array), array.shape)

    def columns(array: Any) -> Any:
        return farray(_data(array), array.shape)

    if not isinstance(array, types.Array) or array.layout not in "CF":
        return counted
    return rows if array.layout == "C" else columns


def pointer(array: Any) -> Any:
    """The address of contiguous `array`'s first element, indexed as the array is (see the
    module); called from Python (numba's JIT off), the array itself."""
    return array


@overload(pointer, inline="always")
def _pointer(array: Any) -> Any:
    def first(array: Any) -> Any:
        return _data(array)

    return first
