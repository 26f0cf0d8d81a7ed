using System;
using System.Collections.Generic;
using System.Globalization;
using System.Numerics;
using System.Runtime.InteropServices;

namespace GymRemote.Native
{
    // Values and spaces to the C ABI's handles and back. A handle this code makes is freed by it on every path
    // (try/finally), or handed to a *_take function, which frees it whatever the outcome.
    internal static class NativeValues
    {
        static readonly BigInteger Int64Min = long.MinValue, Int64Max = long.MaxValue;

        // Throws for a failed gr_ call: an EnvException when the C ABI names a Python exception (gr_to_int64 of a
        // str, say), else a GymRemoteException with gr_last_error's text, after `where` unless that is null (for
        // functions whose text names them).
        internal static Exception LastError(string where, int status = 1)
        {
            string message = Utf8.Decode(NativeMethods.gr_last_error());
            string type = Utf8.Decode(NativeMethods.gr_last_error_type());
            if (type.Length > 0)
            {
                string module = Utf8.Decode(NativeMethods.gr_last_error_module());
                return new EnvException(type, message, module.Length > 0 ? module : "builtins");
            }
            if (message.Length == 0) message = "failed";
            return new GymRemoteException((ClientStatus)status, where == null ? message : where + ": " + message);
        }

        internal static IntPtr Checked(IntPtr handle, string where)
        {
            if (handle == IntPtr.Zero) throw LastError(where);
            return handle;
        }

        internal static void Check(int status, string where)
        {
            if (status != NativeMethods.Ok) throw LastError(where, status);
        }

        // -- Value to gr_value ---------------------------------------------------------------------------------

        // A new gr_value holding `value`: the caller's, to free (or to hand to a *_take function).
        internal static IntPtr ToNative(Value value)
        {
            return ToNative(value, 0);
        }

        static IntPtr ToNative(Value value, int depth)
        {
            if (value == null) throw new ArgumentNullException("value", "a value is null (use Value.None)");
            if (depth > 64) throw new ArgumentException("a value nested deeper than 64 levels cannot travel (PROTOCOL.md §3)");
            switch (value.Kind)
            {
                case ValueKind.None: return Checked(NativeMethods.gr_none(), "gr_none");
                case ValueKind.Bool: return Checked(NativeMethods.gr_bool(value.AsBool ? 1 : 0), "gr_bool");
                case ValueKind.Int: return Int(value.AsInteger);
                case ValueKind.Float: return Checked(NativeMethods.gr_float(value.AsFloat), "gr_float");
                case ValueKind.String:
                    byte[] text = Utf8.Bytes(value.AsString);
                    return Checked(NativeMethods.gr_str(text, (UIntPtr)text.Length), "gr_str");
                case ValueKind.Bytes:
                    byte[] bytes = value.ToByteArray();
                    return Checked(NativeMethods.gr_bytes(bytes, (UIntPtr)bytes.Length), "gr_bytes");
                case ValueKind.List:
                case ValueKind.Tuple:
                    IntPtr sequence = Checked(value.Kind == ValueKind.List ? NativeMethods.gr_list() : NativeMethods.gr_tuple(), "gr_list");
                    return Filled(sequence, () =>
                    {
                        foreach (Value item in value.Items) Check(NativeMethods.gr_list_append_take(sequence, ToNative(item, depth + 1)), "gr_list_append");
                    });
                case ValueKind.Dict: return Dict(value, depth);
                case ValueKind.Scalar: return Scalar(value);
                case ValueKind.Array:
                    byte[] dtype = Utf8.Terminated(value.DType.Str, "a dtype");
                    long[] shape = Shape(value.Shape);
                    return Checked(NativeMethods.gr_array(dtype, shape, (UIntPtr)shape.Length, value.ToByteArray()), "gr_array of " + value.DType);
                case ValueKind.ObjectArray:
                    IntPtr items = ToNative(Value.List(value.Items), depth);
                    try
                    {
                        long[] extents = Shape(value.Shape);
                        return Checked(NativeMethods.gr_object_array(extents, (UIntPtr)extents.Length, items), "gr_object_array");
                    }
                    finally
                    {
                        NativeMethods.gr_value_free(items);
                    }
                case ValueKind.Graph:
                    var parts = new IntPtr[3];
                    try
                    {
                        for (int i = 0; i < parts.Length; i++) parts[i] = ToNative(value.Items[i], depth + 1);
                        return Checked(NativeMethods.gr_graph(parts[0], parts[1], parts[2]), "gr_graph");
                    }
                    finally
                    {
                        foreach (IntPtr part in parts) NativeMethods.gr_value_free(part);
                    }
                default:
                    throw new NotSupportedException("a value of kind " + value.Kind + " has no C form");
            }
        }

        // fill(), then the container; the container freed (by free) if fill throws
        static IntPtr Filled(IntPtr container, Action fill, Action<IntPtr> free = null)
        {
            try
            {
                fill();
                return container;
            }
            catch
            {
                (free ?? NativeMethods.gr_value_free)(container);
                throw;
            }
        }

        static IntPtr Int(BigInteger integer)
        {
            if (integer >= Int64Min && integer <= Int64Max) return Checked(NativeMethods.gr_int((long)integer), "gr_int");
            string hex = integer.Sign < 0 ? "-" + BigInteger.Negate(integer).ToString("x", CultureInfo.InvariantCulture) : integer.ToString("x", CultureInfo.InvariantCulture);
            return Checked(NativeMethods.gr_big_int_hex(Utf8.Terminated(hex, "an int's digits")), "gr_big_int_hex");
        }

        static IntPtr Dict(Value value, int depth)
        {
            bool plain = true;  // str keys without NUL go by name (gr_dict_set_take: no copy); others as pairs
            foreach (var entry in value.Entries)
            {
                if (entry.Key.Kind != ValueKind.String || entry.Key.AsString.IndexOf('\0') >= 0) plain = false;
            }
            IntPtr dict = Checked(plain ? NativeMethods.gr_dict() : NativeMethods.gr_pair_dict(), "gr_dict");
            return Filled(dict, () =>
            {
                foreach (var entry in value.Entries)
                {
                    if (plain)
                    {
                        Check(NativeMethods.gr_dict_set_take(dict, Utf8.Terminated(entry.Key.AsString, "a dict key"), ToNative(entry.Value, depth + 1)), "gr_dict_set");
                        continue;
                    }
                    IntPtr key = ToNative(entry.Key, depth + 1);
                    try
                    {
                        IntPtr item = ToNative(entry.Value, depth + 1);
                        try
                        {
                            Check(NativeMethods.gr_pair_dict_add(dict, key, item), "gr_pair_dict_add");
                        }
                        finally
                        {
                            NativeMethods.gr_value_free(item);
                        }
                    }
                    finally
                    {
                        NativeMethods.gr_value_free(key);
                    }
                }
            });
        }

        static IntPtr Scalar(Value value)
        {
            DType dtype = value.DType;
            byte[] name = Utf8.Terminated(dtype.Str, "a dtype");
            string where = "a NumPy scalar of " + dtype;
            if (!dtype.IsCore) throw new NotSupportedException(where + " has no C form (the C interface takes the core dtypes of PROTOCOL.md §3.4)");
            switch (dtype.Kind)
            {
                case 'b': return Checked(NativeMethods.gr_scalar_bool(value.GetInteger(0).IsZero ? 0 : 1), where);
                case 'i': return Checked(NativeMethods.gr_scalar_int(name, (long)value.GetInteger(0)), where);
                case 'u': return Checked(NativeMethods.gr_scalar_uint(name, (ulong)value.GetInteger(0)), where);
                default: return Checked(NativeMethods.gr_scalar_float(name, value.GetDouble(0)), where);
            }
        }

        static long[] Shape(int[] shape)
        {
            var extents = new long[shape.Length];
            for (int i = 0; i < shape.Length; i++) extents[i] = shape[i];
            return extents;
        }

        // -- gr_value to Value ---------------------------------------------------------------------------------

        // The Value a (borrowed) gr_value holds.
        internal static Value FromNative(IntPtr handle)
        {
            return FromNative(handle, 0);
        }

        static Value FromNative(IntPtr handle, int depth)
        {
            if (depth > 64) throw new ArgumentException("a value nested deeper than 64 levels");
            int kind = NativeMethods.gr_kind_of(handle);
            int count = (int)(ulong)NativeMethods.gr_len(handle);
            switch (kind)
            {
                case NativeMethods.KindNone: return Value.None;
                case NativeMethods.KindBool:
                    int flag;
                    Check(NativeMethods.gr_as_bool(handle, out flag), "gr_as_bool");
                    return Value.Bool(flag != 0);
                case NativeMethods.KindInt:
                    long integer;
                    Check(NativeMethods.gr_as_int64(handle, out integer), "gr_as_int64");
                    return Value.Int(integer);
                case NativeMethods.KindBigInt: return Value.Int(ParseHex(Utf8.Decode(Checked(NativeMethods.gr_big_int_hex_of(handle), "gr_big_int_hex_of"))));
                case NativeMethods.KindFloat:
                    double number;
                    Check(NativeMethods.gr_as_double(handle, out number), "gr_as_double");
                    return Value.Float(number);
                case NativeMethods.KindStr:
                case NativeMethods.KindBytes:
                    UIntPtr size;
                    IntPtr data = Checked(NativeMethods.gr_str_data(handle, out size), "gr_str_data");
                    byte[] bytes = Utf8.Copy(data, (int)(ulong)size);
                    return kind == NativeMethods.KindBytes ? Value.Bytes(bytes) : Value.String(Utf8.Decode(data, bytes.Length));
                case NativeMethods.KindList:
                case NativeMethods.KindTuple:
                    Value[] items = Items(handle, count, depth);
                    return kind == NativeMethods.KindList ? Value.List(items) : Value.Tuple(items);
                case NativeMethods.KindDict:
                case NativeMethods.KindPairDict:
                    var entries = new List<KeyValuePair<Value, Value>>(count);
                    for (int i = 0; i < count; i++)
                    {
                        var index = (UIntPtr)i;
                        Value key = kind == NativeMethods.KindDict ? Value.String(DictKey(handle, index))
                            : FromNative(Checked(NativeMethods.gr_pair_key(handle, index), "gr_pair_key"), depth + 1);
                        entries.Add(new KeyValuePair<Value, Value>(key, FromNative(Checked(NativeMethods.gr_dict_value(handle, index), "gr_dict_value"), depth + 1)));
                    }
                    return Value.Dict(entries);
                case NativeMethods.KindArray:
                case NativeMethods.KindScalar:
                    DType dtype = DType.Parse(Utf8.Decode(Checked(NativeMethods.gr_array_dtype(handle), "gr_array_dtype")));
                    UIntPtr nbytes;
                    IntPtr elements = NativeMethods.gr_array_data(handle, out nbytes);
                    byte[] raw = Utf8.Copy(elements, (int)(ulong)nbytes);
                    return kind == NativeMethods.KindScalar ? Value.Scalar(dtype, raw) : Value.Array(dtype, ShapeOf(handle), raw);
                case NativeMethods.KindObjectArray: return Value.ObjectArray(ShapeOf(handle), Items(handle, count, depth));
                case NativeMethods.KindGraph:
                    Value[] graph = Items(handle, 3, depth);
                    return Value.Graph(graph[0], graph[1], graph[2]);
                default:
                    throw new NotSupportedException("the C interface gave a value of unknown kind " + kind + " (a newer library?)");
            }
        }

        // whether the library has gr_dict_key_data (C ABI 1.1): -1 not asked yet, 0 no, 1 yes
        static int keyData = -1;

        // a str key of a GR_DICT, whole (with the NULs it may hold) from a 1.1 library, up to a NUL from a 1.0 one
        static string DictKey(IntPtr handle, UIntPtr index)
        {
            if (keyData < 0) keyData = (NativeMethods.gr_abi_version() & 0xffff) >= 0x0100 ? 1 : 0;
            if (keyData == 0) return Utf8.Decode(Checked(NativeMethods.gr_dict_key(handle, index), "gr_dict_key"));
            UIntPtr size;
            IntPtr key = Checked(NativeMethods.gr_dict_key_data(handle, index, out size), "gr_dict_key_data");
            return Utf8.Decode(key, (int)(ulong)size);
        }

        static Value[] Items(IntPtr handle, int count, int depth)
        {
            var items = new Value[count];
            for (int i = 0; i < count; i++) items[i] = FromNative(Checked(NativeMethods.gr_item(handle, (UIntPtr)i), "gr_item"), depth + 1);
            return items;
        }

        static int[] ShapeOf(IntPtr handle)
        {
            UIntPtr ndim;
            IntPtr extents = NativeMethods.gr_array_shape(handle, out ndim);
            var shape = new int[(int)(ulong)ndim];
            for (int i = 0; i < shape.Length; i++) shape[i] = checked((int)Marshal.ReadInt64(extents, i * 8));
            return shape;
        }

        // "-?[0-9a-f]+" as gr_big_int_hex_of writes it
        internal static BigInteger ParseHex(string hex)
        {
            bool negative = hex.StartsWith("-", StringComparison.Ordinal);
            // a leading 0 keeps BigInteger from reading the top bit as a sign
            BigInteger magnitude = BigInteger.Parse("0" + (negative ? hex.Substring(1) : hex), NumberStyles.AllowHexSpecifier, CultureInfo.InvariantCulture);
            return negative ? -magnitude : magnitude;
        }

        // A copy of a (borrowed) gr_value through a new handle: Value -> gr_value -> Value, for the tests.
        internal static Value RoundTrip(Value value)
        {
            IntPtr handle = ToNative(value);
            try
            {
                return FromNative(handle);
            }
            finally
            {
                NativeMethods.gr_value_free(handle);
            }
        }

        // -- spaces ----------------------------------------------------------------------------------------

        // A new gr_space for `space` (the caller's, freed with gr_space_free); its description is checked to be
        // the C# space's, so that the learner sees the space the env was written for.
        internal static IntPtr ToNative(Space space)
        {
            IntPtr handle = Build(space);
            try
            {
                IntPtr description = Checked(NativeMethods.gr_space_describe(handle), "gr_space_describe");
                Value described;
                try
                {
                    described = FromNative(description);
                }
                finally
                {
                    NativeMethods.gr_value_free(description);
                }
                if (!described.Equals(space.Describe()))
                {
                    throw new NotSupportedException("the C interface describes the space " + space + " as " + described.Repr() + ", not as " + space.Describe().Repr());
                }
                return handle;
            }
            catch
            {
                NativeMethods.gr_space_free(handle);
                throw;
            }
        }

        static IntPtr Build(Space space)
        {
            string where = "the space " + space;
            var box = space as BoxSpace;
            if (box != null) return Box(box, where);
            var discrete = space as DiscreteSpace;
            if (discrete != null) return Checked(NativeMethods.gr_space_discrete(discrete.N, discrete.Start, Utf8.Terminated(discrete.DType.Str, "a dtype")), where);
            var multiDiscrete = space as MultiDiscreteSpace;
            if (multiDiscrete != null)
            {
                if (multiDiscrete.Nvec.Shape.Length != 1) throw new NotSupportedException(where + ": the C interface takes MultiDiscrete spaces of one dimension");
                long[] nvec = Integers(multiDiscrete.Nvec), start = Integers(multiDiscrete.StartValues);
                return Checked(NativeMethods.gr_space_multi_discrete(nvec, start, (UIntPtr)nvec.Length, Utf8.Terminated(multiDiscrete.DType.Str, "a dtype")), where);
            }
            var multiBinary = space as MultiBinarySpace;
            if (multiBinary != null)
            {
                long[] shape = Shape(multiBinary.Shape);
                return Checked(NativeMethods.gr_space_multi_binary(shape, (UIntPtr)shape.Length), where);
            }
            var tuple = space as TupleSpace;
            if (tuple != null)
            {
                IntPtr handle = Checked(NativeMethods.gr_space_tuple(), where);
                return Filled(handle, () =>
                {
                    foreach (Space child in tuple.Spaces) WithChild(child, built => Check(NativeMethods.gr_space_tuple_add(handle, built), "gr_space_tuple_add"));
                }, NativeMethods.gr_space_free);
            }
            var dict = space as DictSpace;
            if (dict != null)
            {
                IntPtr handle = Checked(NativeMethods.gr_space_dict(), where);
                return Filled(handle, () =>
                {
                    foreach (var entry in dict.Spaces)
                    {
                        byte[] key = Utf8.Terminated(entry.Key, "a Dict space's key");
                        WithChild(entry.Value, built => Check(NativeMethods.gr_space_dict_add(handle, key, built), "gr_space_dict_add"));
                    }
                }, NativeMethods.gr_space_free);
            }
            throw new NotSupportedException(where + " cannot be given to the C interface, which takes Box, Discrete, MultiDiscrete, MultiBinary, Tuple and Dict spaces");
        }

        static IntPtr Box(BoxSpace box, string where)
        {
            byte[] dtype = Utf8.Terminated(box.DType.Str, "a dtype");
            int size = box.Low.Size;
            double low = size > 0 ? box.Low.GetDouble(0) : 0, high = size > 0 ? box.High.GetDouble(0) : 0;
            bool uniform = true;
            for (int i = 0; i < size; i++)
            {
                if (!box.Low.GetDouble(i).Equals(low) || !box.High.GetDouble(i).Equals(high)) uniform = false;
            }
            if (uniform)
            {
                long[] shape = Shape(box.Shape);
                return Checked(NativeMethods.gr_space_box(low, high, shape, (UIntPtr)shape.Length, dtype), where);
            }
            if (box.Shape.Length != 1) throw new NotSupportedException(where + ": the C interface takes per-item bounds for one-dimensional Boxes only");
            return Checked(NativeMethods.gr_space_box_bounds(box.Low.ToDoubles(), box.High.ToDoubles(), (UIntPtr)size, dtype), where);
        }

        static long[] Integers(Value array)
        {
            var values = new long[array.Size];
            for (int i = 0; i < values.Length; i++) values[i] = (long)array.GetInteger(i);
            return values;
        }

        static void WithChild(Space child, Action<IntPtr> use)
        {
            IntPtr built = ToNative(child);
            try
            {
                use(built);
            }
            finally
            {
                NativeMethods.gr_space_free(built);
            }
        }
    }
}
