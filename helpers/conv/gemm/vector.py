"""128-bit loads and stores for Numba CUDA kernels: four float32 in one instruction.

numba-cuda has no public vector load, so :func:`ldg4` and :func:`lds4` are small ``@intrinsic``
functions that emit an LLVM ``<4 x float>`` load from global (address space 1) or shared memory
(address space 3): ``ld.global.v4.f32`` / ``ld.shared.v4.f32`` in the PTX. :func:`stg4` and
:func:`sts4` are the stores. ``i`` is a flat element index into a C-contiguous float32 array;
the address ``data + 4*i`` must be a multiple of 16 bytes (shared arrays declared with
``alignment=16``, ``i % 4 == 0``), or the GPU raises a misaligned-address error. In the Numba
CUDA simulator the same names are plain Python functions of four scalar accesses.

Source: NVIDIA PTX ISA, "Vector data types" (ld/st ``.v4``); CUDA C++ Best Practices Guide,
"Coalesced Access to Global Memory" (wider accesses, fewer instructions).
"""

from __future__ import annotations

from numba import config

__all__ = ["ALIGN", "ldg4", "lds4", "stg4", "sts4"]

#: ``alignment=`` for shared arrays read by :func:`lds4` / written by :func:`sts4`: 16 bytes on a
#: GPU; None in the simulator, which refuses the argument (and has no alignment to keep).
ALIGN = None if config.ENABLE_CUDASIM else 16


if config.ENABLE_CUDASIM:  # the simulator runs kernels as Python: four scalar accesses

    def ldg4(arr, i):
        """(arr[i], arr[i + 1], arr[i + 2], arr[i + 3]) of a 1-D float32 array."""
        return arr[i], arr[i + 1], arr[i + 2], arr[i + 3]

    def lds4(arr, i):
        """As :func:`ldg4`, for a 1-D shared array."""
        return arr[i], arr[i + 1], arr[i + 2], arr[i + 3]

    def stg4(arr, i, v0, v1, v2, v3):
        """arr[i:i + 4] = (v0, v1, v2, v3) for a 1-D float32 array."""
        arr[i], arr[i + 1], arr[i + 2], arr[i + 3] = v0, v1, v2, v3

    def sts4(arr, i, v0, v1, v2, v3):
        """As :func:`stg4`, for a 1-D shared array."""
        arr[i], arr[i + 1], arr[i + 2], arr[i + 3] = v0, v1, v2, v3

else:
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    _VEC = ir.VectorType(ir.FloatType(), 4)

    def _pointer(context, builder, arrty, arr, idx, idxty, space):
        """The address of ``arr.flat[idx]`` as a ``<4 x float>`` pointer in ``space``."""
        ary = context.make_array(arrty)(context, builder, arr)
        i = context.cast(builder, idx, idxty, types.int64)
        ptr = builder.gep(ary.data, [i])
        ptr = builder.addrspacecast(ptr, ir.PointerType(ir.FloatType(), space))
        return builder.bitcast(ptr, ir.PointerType(_VEC, space))

    def _loader(space: int):
        def typer(typingctx, arr, idx):
            if not (isinstance(arr, types.Array) and arr.dtype == types.float32
                    and isinstance(idx, types.Integer)):
                return None
            sig = types.UniTuple(types.float32, 4)(arr, idx)

            def codegen(context, builder, signature, args):
                vptr = _pointer(context, builder, signature.args[0], args[0], args[1],
                                signature.args[1], space)
                v = builder.load(vptr, align=16)
                parts = [builder.extract_element(v, ir.Constant(ir.IntType(32), j))
                         for j in range(4)]
                return context.make_tuple(builder, signature.return_type, parts)

            return sig, codegen

        return typer

    def _storer(space: int):
        def typer(typingctx, arr, idx, v0, v1, v2, v3):
            if not (isinstance(arr, types.Array) and arr.dtype == types.float32
                    and isinstance(idx, types.Integer)):
                return None
            sig = types.void(arr, idx, types.float32, types.float32, types.float32,
                             types.float32)

            def codegen(context, builder, signature, args):
                vptr = _pointer(context, builder, signature.args[0], args[0], args[1],
                                signature.args[1], space)
                v = ir.Constant(_VEC, ir.Undefined)
                for j in range(4):
                    v = builder.insert_element(v, args[2 + j], ir.Constant(ir.IntType(32), j))
                builder.store(v, vptr, align=16)
                return context.get_dummy_value()

            return sig, codegen

        return typer

    def _typer_with_doc(fn, name: str, doc: str):
        fn.__name__, fn.__qualname__, fn.__doc__ = name, name, doc
        return intrinsic(fn)

    ldg4 = _typer_with_doc(_loader(1), "ldg4",
                           "(arr.flat[i], ..., arr.flat[i + 3]) by one ld.global.v4.f32.")
    lds4 = _typer_with_doc(_loader(3), "lds4",
                           "(arr.flat[i], ..., arr.flat[i + 3]) by one ld.shared.v4.f32.")
    stg4 = _typer_with_doc(_storer(1), "stg4", "arr.flat[i:i + 4] = v0..v3 by st.global.v4.f32.")
    sts4 = _typer_with_doc(_storer(3), "sts4", "arr.flat[i:i + 4] = v0..v3 by st.shared.v4.f32.")
