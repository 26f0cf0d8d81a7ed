using System;
using System.Collections.Generic;
using System.Numerics;
using System.Runtime.InteropServices;
using System.Threading;
using AOT;
using GymRemote.Native;

namespace GymRemote
{
    /// <summary>
    /// Serves C# envs to a gym_remote <c>RemoteVectorEnv</c> through the native client (libgym_remote, the C ABI of
    /// clients/cpp). Pumped from the host's own thread: <see cref="Start"/> returns at once, and each
    /// <see cref="Pump"/> does the protocol work that is ready and calls the envs on the calling thread, as a game's
    /// main loop needs; <see cref="Run"/> pumps until the end. Use it from one thread at a time; only
    /// <see cref="RequestStop"/> may be called from another. Dispose it (or let the finalizer, a domain unload or the
    /// process exit do so): the native client then says BYE and closes the envs.
    /// </summary>
    public sealed class Client : IDisposable
    {
        // The callbacks, kept alive for the life of the process (native code holds their pointers).
        static readonly NativeMethods.ResetCallback ResetThunk = OnReset;
        static readonly NativeMethods.StepCallback StepThunk = OnStep;
        static readonly NativeMethods.RenderCallback RenderThunk = OnRender;
        static readonly NativeMethods.GetAttrCallback GetAttrThunk = OnGetAttr;
        static readonly NativeMethods.SetAttrCallback SetAttrThunk = OnSetAttr;
        static readonly NativeMethods.CloseCallback CloseThunk = OnClose;
        static readonly NativeMethods.LogSink LogThunk = OnLog;

        // Clients not yet disposed, disposed when the domain unloads (a Unity domain reload) or the process exits.
        static readonly List<WeakReference> Live = new List<WeakReference>();
        static Action<LogLevel, string> logSink;
        static bool abiChecked;

        readonly object gate = new object();
        readonly IEnv[] envs;
        GCHandle self;  // weak: the client's `user` pointer, which does not keep it alive
        IntPtr handle;
        int pumping;
        string failure = "";

        static Client()
        {
            AppDomain.CurrentDomain.DomainUnload += (sender, arguments) => DisposeAll();
            AppDomain.CurrentDomain.ProcessExit += (sender, arguments) => DisposeAll();
        }

        /// <summary>
        /// A client for <paramref name="envs"/> (one per slot it serves), which must all have equal spaces, class
        /// names, metadata and render modes (the C interface takes one of each). Throws
        /// <see cref="ArgumentException"/> for bad options or envs, <see cref="NotSupportedException"/> for a space
        /// the C interface cannot carry, <see cref="GymRemoteException"/> when the native library is missing or of
        /// another major version.
        /// </summary>
        public Client(ClientOptions options, IList<IEnv> envs)
        {
            if (options == null) throw new ArgumentNullException("options");
            if (envs == null || envs.Count == 0) throw new ArgumentException("a client hosts at least one env", "envs");
            if (envs.Count > 65535) throw new ArgumentException("a client hosts at most 65535 envs, not " + envs.Count, "envs");
            this.envs = new IEnv[envs.Count];
            envs.CopyTo(this.envs, 0);
            CheckEnvs(this.envs);
            CheckAbi();
            if (options.LogLevel.HasValue) NativeValues.Check(NativeMethods.gr_set_log_level((int)options.LogLevel.Value), "gr_set_log_level");
            IEnv first = this.envs[0];
            var pointers = new List<IntPtr>();
            IntPtr nativeOptions = IntPtr.Zero, observationSpace = IntPtr.Zero, actionSpace = IntPtr.Zero, metadata = IntPtr.Zero;
            try
            {
                nativeOptions = ToNative(options);
                observationSpace = NativeValues.ToNative(first.ObservationSpace);
                actionSpace = NativeValues.ToNative(first.ActionSpace);
                metadata = NativeValues.ToNative(first.Metadata ?? Value.Dict());
                var callbacks = new NativeMethods.EnvCallbacks
                {
                    StructSize = (uint)Marshal.SizeOf(typeof(NativeMethods.EnvCallbacks)),
                    ClassName = Unmanaged(first.ClassName, "the class name", pointers),
                    Metadata = metadata,
                    RenderMode = Unmanaged(first.RenderMode, "the render mode", pointers),
                    Reset = Marshal.GetFunctionPointerForDelegate(ResetThunk),
                    Step = Marshal.GetFunctionPointerForDelegate(StepThunk),
                    Render = Marshal.GetFunctionPointerForDelegate(RenderThunk),
                    GetAttr = Marshal.GetFunctionPointerForDelegate(GetAttrThunk),
                    SetAttr = Marshal.GetFunctionPointerForDelegate(SetAttrThunk),
                    Close = Marshal.GetFunctionPointerForDelegate(CloseThunk),
                };
                self = GCHandle.Alloc(this, GCHandleType.Weak);
                handle = NativeMethods.gr_client_new(nativeOptions, (UIntPtr)this.envs.Length, observationSpace, actionSpace, ref callbacks, GCHandle.ToIntPtr(self));
                if (handle == IntPtr.Zero)
                {
                    self.Free();
                    throw NativeValues.LastError("gr_client_new");
                }
            }
            finally
            {
                foreach (IntPtr pointer in pointers) Marshal.FreeHGlobal(pointer);
                NativeMethods.gr_value_free(metadata);
                NativeMethods.gr_space_free(actionSpace);
                NativeMethods.gr_space_free(observationSpace);
                NativeMethods.gr_options_free(nativeOptions);
            }
            lock (Live) Live.Add(new WeakReference(this));
        }

        ~Client()
        {
            Free();
        }

        /// <summary>The envs, by their index among this client's (slot <c>Slots[i]</c> of the vector is env i).</summary>
        public IReadOnlyList<IEnv> Envs
        {
            get { return envs; }
        }

        /// <summary>The version of the native library's C ABI: (major &lt;&lt; 16) | (minor &lt;&lt; 8) | patch.</summary>
        public static uint NativeAbiVersion
        {
            get
            {
                CheckAbi();
                return NativeMethods.gr_abi_version();
            }
        }

        /// <summary>Where the client stands.</summary>
        public ClientState State
        {
            get { return (ClientState)NativeMethods.gr_client_state(Handle); }
        }

        /// <summary>Why the client ended, or why the last call failed; "" while all is well.</summary>
        public string Error
        {
            get
            {
                string final = Utf8.Decode(NativeMethods.gr_client_error(Handle));
                return final.Length > 0 ? final : failure;
            }
        }

        /// <summary>The env whose step is pending (returned <see cref="StepResult.Pending"/>), or -1.</summary>
        public int PendingEnv
        {
            get { return (int)NativeMethods.gr_client_pending_env(Handle); }
        }

        /// <summary>The vector's indexes of the slots served, of env 0, 1, ... (empty before the first WELCOME).</summary>
        public long[] Slots
        {
            get
            {
                IntPtr client = Handle;
                var slots = new long[(int)(ulong)NativeMethods.gr_client_slots(client, null, UIntPtr.Zero)];
                int count = (int)(ulong)NativeMethods.gr_client_slots(client, slots, (UIntPtr)slots.Length);
                if (count < slots.Length) Array.Resize(ref slots, count);
                return slots;
            }
        }

        IntPtr Handle
        {
            get
            {
                IntPtr client = handle;
                if (client == IntPtr.Zero) throw new ObjectDisposedException("Client");
                return client;
            }
        }

        /// <summary>Checks the options and opens the connection; returns at once.</summary>
        public ClientStatus Start()
        {
            return Outcome(NativeMethods.gr_client_start(Handle));
        }

        /// <summary>
        /// Does the protocol work that is ready, calling the envs on this thread; returns within about
        /// <paramref name="maxWaitSeconds"/> (0: only what is ready now; at once while a step is pending).
        /// <see cref="ClientStatus.Ok"/> while the client goes on; once it ended, its final status (Ok after the server
        /// closed; see <see cref="State"/>).
        /// </summary>
        public ClientStatus Pump(double maxWaitSeconds)
        {
            IntPtr client = Handle;
            Interlocked.Increment(ref pumping);
            try
            {
                return Outcome(NativeMethods.gr_client_pump(client, maxWaitSeconds));
            }
            finally
            {
                Interlocked.Decrement(ref pumping);
            }
        }

        /// <summary>Starts, then pumps until the end; the final status.</summary>
        public ClientStatus Run()
        {
            IntPtr client = Handle;
            Interlocked.Increment(ref pumping);
            try
            {
                return Outcome(NativeMethods.gr_client_run(client));
            }
            finally
            {
                Interlocked.Decrement(ref pumping);
            }
        }

        /// <summary>Asks the client to leave (BYE): the next pump ends it with <see cref="ClientStatus.Stopped"/>. Safe from any thread.</summary>
        public void RequestStop()
        {
            lock (gate)
            {
                if (handle != IntPtr.Zero) NativeMethods.gr_client_request_stop(handle);
            }
        }

        /// <summary>Gives the result of env <paramref name="env"/>'s pending step; the next pump answers the command.</summary>
        public void CompleteStep(int env, StepResult result)
        {
            if (result == null || result.IsPending) throw new ArgumentException("CompleteStep takes the step's result, not " + (result == null ? "null" : "StepResult.Pending"), "result");
            IntPtr client = Handle;
            CheckEnvIndex(env);
            IntPtr observation = NativeValues.ToNative(result.Observation);
            try
            {
                IntPtr info = NativeValues.ToNative(result.Info);
                try
                {
                    int status = NativeMethods.gr_client_complete_step(client, (UIntPtr)env, observation, result.Reward, result.Terminated ? 1 : 0, result.Truncated ? 1 : 0, info);
                    NativeValues.Check(status, null);
                }
                finally
                {
                    NativeMethods.gr_value_free(info);
                }
            }
            finally
            {
                NativeMethods.gr_value_free(observation);
            }
        }

        /// <summary>
        /// Fails env <paramref name="env"/>'s pending step with <paramref name="error"/>, which the learner raises as the
        /// Python exception <see cref="EnvException.From"/> names.
        /// </summary>
        public void FailStep(int env, Exception error)
        {
            if (error == null) throw new ArgumentNullException("error");
            IntPtr client = Handle;
            CheckEnvIndex(env);
            EnvException raised = EnvException.From(error);
            int status = NativeMethods.gr_client_fail_step(client, (UIntPtr)env, Utf8.Terminated(raised.TypeName, "an exception type"),
                Utf8.Terminated(raised.Module ?? "builtins", "an exception module"), Utf8.Terminated(Printable(raised.Message), "a message"));
            NativeValues.Check(status, null);
        }

        /// <summary>Ends a client still running as <see cref="RequestStop"/> does (BYE, envs closed), and frees it.</summary>
        public void Dispose()
        {
            if (Volatile.Read(ref pumping) > 0) throw new InvalidOperationException("Dispose was called from inside a callback of this client's Pump or Run; call RequestStop there");
            Free();
            GC.SuppressFinalize(this);
        }

        /// <summary>
        /// Sends the native client's log lines (process-wide) to <paramref name="sink"/> (called from any thread that
        /// logs, one call at a time), or back to stderr for null.
        /// </summary>
        public static void SetLogSink(Action<LogLevel, string> sink)
        {
            CheckAbi();
            logSink = sink;
            NativeMethods.gr_set_log_sink(sink == null ? IntPtr.Zero : Marshal.GetFunctionPointerForDelegate(LogThunk), IntPtr.Zero);
        }

        // The binding's own warnings, to the sink or stderr.
        internal static void Log(LogLevel level, string message)
        {
            Action<LogLevel, string> sink = logSink;
            if (sink != null) sink(level, message);
            else Console.Error.WriteLine("gym_remote " + level.ToString().ToUpperInvariant() + ": " + message);
        }

        void Free()
        {
            IntPtr client;
            lock (gate)
            {
                client = handle;
                handle = IntPtr.Zero;
            }
            if (client != IntPtr.Zero) NativeMethods.gr_client_free(client);  // closes the envs through the callbacks
            if (self.IsAllocated) self.Free();
        }

        static void DisposeAll()
        {
            var clients = new List<Client>();
            lock (Live)
            {
                foreach (WeakReference reference in Live)
                {
                    var client = reference.Target as Client;
                    if (client != null) clients.Add(client);
                }
                Live.Clear();
            }
            foreach (Client client in clients) client.Free();
            // The native library outlives the domain (a Unity domain reload): its log lines must not call into it.
            if (logSink != null) SetLogSink(null);
        }

        ClientStatus Outcome(int status)
        {
            if (status != NativeMethods.Ok) failure = Utf8.Decode(NativeMethods.gr_last_error());
            return (ClientStatus)status;
        }

        void CheckEnvIndex(int env)
        {
            if (env < 0 || env >= envs.Length) throw new ArgumentOutOfRangeException("env", "the client hosts envs 0.." + (envs.Length - 1) + ", not " + env);
        }

        static void CheckAbi()
        {
            if (abiChecked) return;
            uint version;
            try
            {
                version = NativeMethods.gr_abi_version();
            }
            catch (DllNotFoundException error)
            {
                throw new GymRemoteException(ClientStatus.Internal,
                    "the native library gym_remote (libgym_remote.so, gym_remote.dll, libgym_remote.dylib) was not found: build clients/cpp and put its " +
                    "directory on LD_LIBRARY_PATH (Linux), PATH (Windows) or DYLD_LIBRARY_PATH (macOS), or next to the program (" + error.Message + ")");
            }
            catch (EntryPointNotFoundException error)
            {
                throw new GymRemoteException(ClientStatus.Internal, "the native library gym_remote has no gr_abi_version: it is not gym_remote's C interface (" + error.Message + ")");
            }
            if (version >> 16 != NativeMethods.AbiMajor)
            {
                throw new GymRemoteException(ClientStatus.Internal,
                    "the native library gym_remote has C ABI version " + (version >> 16) + "." + ((version >> 8) & 0xff) + "." + (version & 0xff) +
                    ", and this binding was written for major version " + NativeMethods.AbiMajor + ": use a library and a binding of the same release");
            }
            abiChecked = true;
        }

        static void CheckEnvs(IEnv[] envs)
        {
            for (int i = 0; i < envs.Length; i++)
            {
                if (envs[i] == null) throw new ArgumentNullException("envs", "env " + i + " is null");
            }
            IEnv first = envs[0];
            for (int i = 1; i < envs.Length; i++)
            {
                IEnv other = envs[i];
                string differs = null;
                if (!Equals(other.ObservationSpace, first.ObservationSpace)) differs = "observation space " + other.ObservationSpace + ", not " + first.ObservationSpace;
                else if (!Equals(other.ActionSpace, first.ActionSpace)) differs = "action space " + other.ActionSpace + ", not " + first.ActionSpace;
                else if (other.ClassName != first.ClassName) differs = "class name " + other.ClassName + ", not " + first.ClassName;
                else if (other.RenderMode != first.RenderMode) differs = "render mode " + (other.RenderMode ?? "None") + ", not " + (first.RenderMode ?? "None");
                else if (!Equals(other.Metadata, first.Metadata)) differs = "metadata " + other.Metadata + ", not " + first.Metadata;
                if (differs != null)
                {
                    throw new ArgumentException("the envs of one client share their spaces, class name, metadata and render mode (the C interface takes one of each), " +
                        "but env " + i + " has the " + differs + " of env 0: use one client per kind of env", "envs");
                }
            }
        }

        static IntPtr ToNative(ClientOptions options)
        {
            IntPtr native = NativeValues.Checked(NativeMethods.gr_options_new(), "gr_options_new");
            try
            {
                Option(NativeMethods.gr_options_set_endpoint(native, Utf8.Terminated(options.Endpoint ?? "", "the endpoint")), "Endpoint");
                if (options.Name != null) Option(NativeMethods.gr_options_set_name(native, Utf8.Terminated(options.Name, "the name")), "Name");
                double?[] seconds = { options.ConnectTimeout, options.SlotTimeout, options.ReconnectTimeout, options.LivenessTimeout, options.Spin };
                string[] names = { "ConnectTimeout", "SlotTimeout", "ReconnectTimeout", "LivenessTimeout", "Spin" };
                for (int which = 0; which < seconds.Length; which++)  // GR_CONNECT_TIMEOUT .. GR_SPIN
                {
                    if (seconds[which].HasValue) Option(NativeMethods.gr_options_set_seconds(native, which, seconds[which].Value), names[which]);
                }
                Option(NativeMethods.gr_options_set_flag(native, 0, options.WaitForSlot ? 1 : 0), "WaitForSlot");
                Option(NativeMethods.gr_options_set_flag(native, 1, options.Reconnect ? 1 : 0), "Reconnect");
                if (options.DataPlane.HasValue) Option(NativeMethods.gr_options_set_flag(native, 2, options.DataPlane.Value ? 1 : 0), "DataPlane");
                if (options.SecretFile != null)
                {
                    Option(NativeMethods.gr_options_set_secret_file(native, Utf8.Terminated(options.SecretFile, "the secret file's path")), "SecretFile");
                }
                else if (options.ServerKey != null || options.ClientKey != null || options.Secret != null)
                {
                    int status = NativeMethods.gr_options_set_security(native, Utf8.Terminated(options.ServerKey, "the server key"),
                        Utf8.Terminated(options.ClientKey, "the client key"), Utf8.Terminated(options.Secret, "the secret"));
                    Option(status, "ServerKey/ClientKey/Secret");
                }
                return native;
            }
            catch
            {
                NativeMethods.gr_options_free(native);
                throw;
            }
        }

        static void Option(int status, string name)
        {
            if (status != NativeMethods.Ok) throw new ArgumentException("ClientOptions." + name + ": " + Utf8.Decode(NativeMethods.gr_last_error()));
        }

        // a NUL-terminated UTF-8 copy in unmanaged memory (freed by the caller through `owned`), or null
        static IntPtr Unmanaged(string text, string what, List<IntPtr> owned)
        {
            byte[] bytes = Utf8.Terminated(text, what);
            if (bytes == null) return IntPtr.Zero;
            IntPtr pointer = Marshal.AllocHGlobal(bytes.Length);
            owned.Add(pointer);
            Marshal.Copy(bytes, 0, pointer, bytes.Length);
            return pointer;
        }

        static string Printable(string message)
        {
            return (message ?? "").Replace("\0", "\\x00");
        }

        // -- the callbacks: no exception leaves them ------------------------------------------------------------

        static IEnv EnvOf(IntPtr user, UIntPtr env)
        {
            var client = GCHandle.FromIntPtr(user).Target as Client;
            if (client == null) throw new ObjectDisposedException("Client", "the C# client of this native client was collected");
            return client.envs[(int)(ulong)env];
        }

        // The env's exception as the learner is to raise it, into `error`; GR_ENV_ERROR.
        static int Raise(IntPtr error, Exception raised)
        {
            try
            {
                EnvException named = EnvException.From(raised);
                NativeMethods.gr_error_set(error, Utf8.Terminated(named.TypeName, "an exception type"), Utf8.Terminated(named.Module ?? "builtins", "an exception module"),
                    Utf8.Terminated(Printable(named.Message), "a message"));
            }
            catch (Exception)
            {
                // the native side reports a RuntimeError for a callback that failed without a named error
            }
            return NativeMethods.EnvError;
        }

        [MonoPInvokeCallback(typeof(NativeMethods.ResetCallback))]
        static int OnReset(IntPtr user, UIntPtr env, int hasSeed, ulong seed, IntPtr seedValue, IntPtr options, IntPtr observation, IntPtr info, IntPtr error)
        {
            try
            {
                IEnv target = EnvOf(user, env);
                // the seed from its value, whatever its size and sign (`seed` wraps negative ones)
                BigInteger? given = hasSeed == 0 ? (BigInteger?)null : NativeValues.FromNative(seedValue).AsInteger;
                ResetResult result = target.Reset(given, options == IntPtr.Zero ? null : NativeValues.FromNative(options));
                if (result == null) throw new InvalidOperationException(target.ClassName + ".Reset returned null");
                NativeValues.Check(NativeMethods.gr_value_take(observation, NativeValues.ToNative(result.Observation)), "the observation");
                NativeValues.Check(NativeMethods.gr_value_take(info, NativeValues.ToNative(result.Info)), "the info");
                return NativeMethods.Ok;
            }
            catch (Exception raised)
            {
                return Raise(error, raised);
            }
        }

        [MonoPInvokeCallback(typeof(NativeMethods.StepCallback))]
        static int OnStep(IntPtr user, UIntPtr env, IntPtr action, IntPtr result, IntPtr error)
        {
            try
            {
                IEnv target = EnvOf(user, env);
                StepResult step = target.Step(NativeValues.FromNative(action));
                if (step == null) throw new InvalidOperationException(target.ClassName + ".Step returned null");
                if (step.IsPending) return NativeMethods.Pending;
                IntPtr observation = NativeValues.ToNative(step.Observation);
                IntPtr info;
                try
                {
                    info = NativeValues.ToNative(step.Info);
                }
                catch
                {
                    NativeMethods.gr_value_free(observation);
                    throw;
                }
                int status = NativeMethods.gr_step_result_take(result, observation, step.Reward, step.Terminated ? 1 : 0, step.Truncated ? 1 : 0, info);
                NativeValues.Check(status, "the step's result");
                return NativeMethods.Ok;
            }
            catch (Exception raised)
            {
                return Raise(error, raised);
            }
        }

        [MonoPInvokeCallback(typeof(NativeMethods.RenderCallback))]
        static int OnRender(IntPtr user, UIntPtr env, IntPtr frame, IntPtr error)
        {
            try
            {
                Value rendered = EnvOf(user, env).Render() ?? Value.None;
                NativeValues.Check(NativeMethods.gr_value_take(frame, NativeValues.ToNative(rendered)), "the rendered frame");
                return NativeMethods.Ok;
            }
            catch (Exception raised)
            {
                return Raise(error, raised);
            }
        }

        // get_attr and set_attr have no error to fill: a failure is logged, and the name counts as not the env's own
        [MonoPInvokeCallback(typeof(NativeMethods.GetAttrCallback))]
        static int OnGetAttr(IntPtr user, UIntPtr env, IntPtr name, IntPtr value)
        {
            try
            {
                Value found;
                if (!EnvOf(user, env).TryGetAttribute(Utf8.Decode(name), out found) || found == null) return 0;
                NativeValues.Check(NativeMethods.gr_value_take(value, NativeValues.ToNative(found)), "the attribute");
                return 1;
            }
            catch (Exception raised)
            {
                Log(LogLevel.Warning, "get_attr(" + Utf8.Decode(name) + ") of env " + env + " failed, answered as no such attribute: " + raised);
                return 0;
            }
        }

        [MonoPInvokeCallback(typeof(NativeMethods.SetAttrCallback))]
        static int OnSetAttr(IntPtr user, UIntPtr env, IntPtr name, IntPtr value)
        {
            try
            {
                return EnvOf(user, env).TrySetAttribute(Utf8.Decode(name), NativeValues.FromNative(value)) ? 1 : 0;
            }
            catch (Exception raised)
            {
                Log(LogLevel.Warning, "set_attr(" + Utf8.Decode(name) + ") of env " + env + " failed, the value kept by the client instead: " + raised);
                return 0;
            }
        }

        [MonoPInvokeCallback(typeof(NativeMethods.CloseCallback))]
        static void OnClose(IntPtr user, UIntPtr env)
        {
            try
            {
                var client = GCHandle.FromIntPtr(user).Target as Client;
                if (client != null) client.envs[(int)(ulong)env].Close();
            }
            catch (Exception raised)
            {
                Log(LogLevel.Warning, "close() of env " + env + " failed: " + raised);
            }
        }

        [MonoPInvokeCallback(typeof(NativeMethods.LogSink))]
        static void OnLog(IntPtr user, int level, IntPtr message)
        {
            try
            {
                Action<LogLevel, string> sink = logSink;
                if (sink != null) sink((LogLevel)level, Utf8.Decode(message));
            }
            catch (Exception)
            {
                // a log line that cannot be shown is dropped: nothing may unwind into native code
            }
        }
    }
}
