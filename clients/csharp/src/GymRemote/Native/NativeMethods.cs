using System;
using System.Runtime.InteropServices;

namespace GymRemote.Native
{
    // The C ABI of clients/cpp (include/gym_remote/gym_remote.h), declared for P/Invoke. Strings go in as
    // NUL-terminated UTF-8 byte arrays (Utf8.Encode) and come out as pointers decoded by Utf8.Decode: .NET
    // Standard 2.0 has no UTF-8 string marshalling. size_t is UIntPtr. The library is found as "gym_remote"
    // (libgym_remote.so through LD_LIBRARY_PATH under Mono, gym_remote.dll / libgym_remote.dylib elsewhere).
    internal static class NativeMethods
    {
        const string Library = "gym_remote";

        // The major version of the C ABI this binding was written for (gym_remote.h's GR_ABI_VERSION >> 16).
        internal const uint AbiMajor = 1;

        internal const int Ok = 0;
        internal const int EnvError = 3;
        internal const int Pending = 12;

        // gym_remote.h's gr_kind
        internal const int KindNone = 0, KindBool = 1, KindInt = 2, KindBigInt = 3, KindFloat = 4, KindStr = 5, KindBytes = 6,
            KindList = 7, KindTuple = 8, KindDict = 9, KindPairDict = 10, KindArray = 11, KindScalar = 12, KindObjectArray = 13,
            KindGraph = 14;

        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        internal delegate int ResetCallback(IntPtr user, UIntPtr env, int hasSeed, ulong seed, IntPtr seedValue, IntPtr options,
            IntPtr observation, IntPtr info, IntPtr error);

        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        internal delegate int StepCallback(IntPtr user, UIntPtr env, IntPtr action, IntPtr result, IntPtr error);

        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        internal delegate int RenderCallback(IntPtr user, UIntPtr env, IntPtr frame, IntPtr error);

        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        internal delegate int GetAttrCallback(IntPtr user, UIntPtr env, IntPtr name, IntPtr value);

        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        internal delegate int SetAttrCallback(IntPtr user, UIntPtr env, IntPtr name, IntPtr value);

        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        internal delegate void CloseCallback(IntPtr user, UIntPtr env);

        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        internal delegate void LogSink(IntPtr user, int level, IntPtr message);

        // gr_env_callbacks, field for field (function pointers from Marshal.GetFunctionPointerForDelegate)
        [StructLayout(LayoutKind.Sequential)]
        internal struct EnvCallbacks
        {
            public uint StructSize;
            public IntPtr ClassName;
            public IntPtr Metadata;
            public IntPtr RenderMode;
            public IntPtr Reset;
            public IntPtr Step;
            public IntPtr Render;
            public IntPtr GetAttr;
            public IntPtr SetAttr;
            public IntPtr Close;
        }

        // -- version, errors, logs

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern uint gr_abi_version();

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_last_error();

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_last_error_type();

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_last_error_module();

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_set_log_level(int level);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern void gr_set_log_sink(IntPtr sink, IntPtr user);

        // -- values

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_none();

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_bool(int value);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_int(long value);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_big_int_hex(byte[] hex);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_float(double value);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_str(byte[] utf8, UIntPtr size);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_bytes(byte[] data, UIntPtr size);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_list();

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_tuple();

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_dict();

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_pair_dict();

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_array(byte[] dtype, long[] shape, UIntPtr ndim, byte[] data);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_scalar_int(byte[] dtype, long value);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_scalar_uint(byte[] dtype, ulong value);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_scalar_float(byte[] dtype, double value);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_scalar_bool(int value);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_object_array(long[] shape, UIntPtr ndim, IntPtr items);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_graph(IntPtr nodes, IntPtr edges, IntPtr edgeLinks);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern void gr_value_free(IntPtr value);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_value_take(IntPtr target, IntPtr source);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_list_append_take(IntPtr sequence, IntPtr item);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_dict_set_take(IntPtr dict, byte[] key, IntPtr item);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_pair_dict_add(IntPtr dict, IntPtr key, IntPtr item);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_kind_of(IntPtr value);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern UIntPtr gr_len(IntPtr value);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_as_bool(IntPtr value, out int result);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_as_int64(IntPtr value, out long result);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_as_double(IntPtr value, out double result);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_big_int_hex_of(IntPtr value);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_str_data(IntPtr value, out UIntPtr size);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_item(IntPtr value, UIntPtr index);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_dict_key(IntPtr value, UIntPtr index);

        // since C ABI 1.1
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_dict_key_data(IntPtr value, UIntPtr index, out UIntPtr size);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_dict_value(IntPtr value, UIntPtr index);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_pair_key(IntPtr value, UIntPtr index);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_array_dtype(IntPtr value);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_array_shape(IntPtr value, out UIntPtr ndim);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_array_data(IntPtr value, out UIntPtr size);

        // -- spaces

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_space_box(double low, double high, long[] shape, UIntPtr ndim, byte[] dtype);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_space_box_bounds(double[] low, double[] high, UIntPtr n, byte[] dtype);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_space_discrete(long n, long start, byte[] dtype);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_space_multi_discrete(long[] nvec, long[] start, UIntPtr n, byte[] dtype);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_space_multi_binary(long[] shape, UIntPtr ndim);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_space_dict();

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_space_tuple();

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_space_dict_add(IntPtr dict, byte[] key, IntPtr child);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_space_tuple_add(IntPtr tuple, IntPtr child);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_space_describe(IntPtr space);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern void gr_space_free(IntPtr space);

        // -- options

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_options_new();

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern void gr_options_free(IntPtr options);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_options_set_endpoint(IntPtr options, byte[] endpoint);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_options_set_name(IntPtr options, byte[] name);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_options_set_seconds(IntPtr options, int which, double seconds);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_options_set_flag(IntPtr options, int which, int on);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_options_set_security(IntPtr options, byte[] serverKey, byte[] clientKey, byte[] secret);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_options_set_secret_file(IntPtr options, byte[] path);

        // -- envs and the client

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_error_set(IntPtr error, byte[] type, byte[] module, byte[] message);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_step_result_take(IntPtr result, IntPtr observation, double reward, int terminated, int truncated, IntPtr info);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_client_new(IntPtr options, UIntPtr numEnvs, IntPtr observationSpace, IntPtr actionSpace,
            ref EnvCallbacks callbacks, IntPtr user);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_client_start(IntPtr client);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_client_pump(IntPtr client, double maxWaitSeconds);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_client_run(IntPtr client);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_client_state(IntPtr client);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern IntPtr gr_client_error(IntPtr client);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern void gr_client_request_stop(IntPtr client);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern long gr_client_pending_env(IntPtr client);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_client_complete_step(IntPtr client, UIntPtr env, IntPtr observation, double reward, int terminated,
            int truncated, IntPtr info);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern int gr_client_fail_step(IntPtr client, UIntPtr env, byte[] type, byte[] module, byte[] message);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern UIntPtr gr_client_slots(IntPtr client, long[] output, UIntPtr capacity);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        internal static extern void gr_client_free(IntPtr client);
    }
}
