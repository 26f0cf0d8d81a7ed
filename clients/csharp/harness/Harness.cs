using System;
using System.Collections.Generic;
using System.Globalization;
using System.Numerics;
using System.Text;
using GymRemote.Envs;

namespace GymRemote.Harness
{
    /// <summary>
    /// GymRemote.Harness.exe: drives one C# env from JSON lines on stdin and answers each with a JSON line on
    /// stdout, so that tests in Python can compare the C# envs with Gymnasium's bit for bit. No network.
    ///
    /// Commands: {"op": "make", "env": "Probe" | "CartPole", "render_mode": null}, {"op": "reset", "seed": int or
    /// null, "options": value (absent: no options)}, {"op": "step", "action": value}, {"op": "get_attr", "name"},
    /// {"op": "set_attr", "name", "value"}, {"op": "render"}, {"op": "close"}; and for the space classes,
    /// {"op": "catalog"} (the descriptions of a fixed list of spaces) and {"op": "contains", "space": index, "value"};
    /// {"op": "dtype", "text"} reads a dtype string; {"op": "echo", "value"} reads a value and writes it back;
    /// {"op": "equal", "left", "right"} compares two values; {"op": "key_equal", "left", "right"} compares them as dict
    /// keys (Value.PythonKeys) and builds a dict of both; {"op": "repr", "value"} gives Value.Repr(). Through the native
    /// library (libgym_remote on LD_LIBRARY_PATH): {"op": "native_echo", "value"} converts a value to a gr_value handle
    /// and back; {"op": "client", "envs": ["Probe" | "CartPole", ...], "endpoint"} makes a Client (not started) and
    /// answers its state, the library's ABI version and the errors of CompleteStep misused; {"op": "log_sink",
    /// "endpoint"} runs a client that finds no server with its log lines sent to a C# sink, and answers them; {"op": "python_error", "dotnet": "System.ArgumentException",
    /// "message"} answers the Python exception EnvException.From names for that .NET exception; {"op": "domain_client",
    /// "endpoint", "no_server"} serves a probe from a client made in another AppDomain (with a log sink of its own),
    /// pumped until it has been a member for a second and left undisposed, then unloads that domain (as a Unity
    /// domain reload does), then runs a client of this domain, logging at DEBUG, that finds no server at no_server. Each answer has "ok";
    /// a failed command answers {"ok": false, "type", "module", "message"}.
    ///
    /// Values are written exactly: null, true/false, strings and ints in 64 bits as JSON; a float as ["f", the
    /// 16 hex digits of its IEEE bits]; a bigger int as ["i", hex]; bytes as ["b", hex]; ["l", ...] and ["t", ...]
    /// for lists and tuples; objects for dicts with string keys, else ["d", k1, v1, ...]; a NumPy scalar as
    /// ["s", dtype, hex of its bytes]; an array as ["a", dtype, shape, hex of its bytes]; an object array as
    /// ["o", shape, [items]]; a GraphInstance as ["g", nodes, edges, edge_links].
    /// </summary>
    public static class Program
    {
        public static int Main()
        {
            IEnv env = null;
            string line;
            var output = Console.Out;
            while ((line = Console.In.ReadLine()) != null)
            {
                if (line.Trim().Length == 0) continue;
                var answer = new List<KeyValuePair<string, object>>();
                try
                {
                    var command = Field(Json.Parse(line), null);
                    string op = (string)Field(command, "op");
                    if (op != "make" && !EnvFree.Contains(op) && env == null) throw new InvalidOperationException("make an env first");
                    Run(op, command, ref env, answer);
                    answer.Insert(0, new KeyValuePair<string, object>("ok", true));
                }
                catch (Exception error)
                {
                    var envError = error as EnvException;
                    answer.Clear();
                    answer.Add(new KeyValuePair<string, object>("ok", false));
                    answer.Add(new KeyValuePair<string, object>("type", envError != null ? envError.TypeName : error.GetType().Name));
                    answer.Add(new KeyValuePair<string, object>("module", envError != null ? envError.Module : error.GetType().Namespace));
                    answer.Add(new KeyValuePair<string, object>("message", error.Message));
                }
                var builder = new StringBuilder();
                Write(builder, answer);
                output.WriteLine(builder.ToString());
                output.Flush();
            }
            return 0;
        }

        // commands that need no env made first
        static readonly HashSet<string> EnvFree = new HashSet<string>
        {
            "catalog", "contains", "dtype", "echo", "equal", "key_equal", "repr", "native_echo", "client", "python_error", "domain_client", "log_sink",
        };

        static void Run(string op, object command, ref IEnv env, List<KeyValuePair<string, object>> answer)
        {
            switch (op)
            {
                case "make":
                    string name = (string)Field(command, "env");
                    string renderMode = (string)FieldOr(command, "render_mode");
                    env = Make(name, renderMode);
                    answer.Add(Pair("class_name", env.ClassName));
                    answer.Add(Pair("observation_space", env.ObservationSpace.Describe()));
                    answer.Add(Pair("action_space", env.ActionSpace.Describe()));
                    answer.Add(Pair("metadata", env.Metadata));
                    answer.Add(Pair("render_mode", env.RenderMode));
                    break;
                case "reset":
                    object seed = FieldOr(command, "seed");
                    Value options = Has(command, "options") ? ToValue(Field(command, "options")) : null;
                    ResetResult reset = env.Reset(seed == null ? (BigInteger?)null : BigInteger.Parse(((JsonNumber)seed).Text, CultureInfo.InvariantCulture), options);
                    answer.Add(Pair("observation", reset.Observation));
                    answer.Add(Pair("info", reset.Info));
                    break;
                case "step":
                    StepResult step = env.Step(ToValue(Field(command, "action")));
                    answer.Add(Pair("observation", step.Observation));
                    answer.Add(Pair("reward", Value.Float(step.Reward)));
                    answer.Add(Pair("terminated", step.Terminated));
                    answer.Add(Pair("truncated", step.Truncated));
                    answer.Add(Pair("info", step.Info));
                    break;
                case "get_attr":
                    Value found;
                    bool has = env.TryGetAttribute((string)Field(command, "name"), out found);
                    answer.Add(Pair("found", has));
                    answer.Add(Pair("value", has ? found : Value.None));
                    break;
                case "set_attr":
                    answer.Add(Pair("found", env.TrySetAttribute((string)Field(command, "name"), ToValue(Field(command, "value")))));
                    break;
                case "render":
                    answer.Add(Pair("value", env.Render()));
                    break;
                case "catalog":
                    var descriptions = new List<Value>();
                    foreach (Space space in Catalog) descriptions.Add(space.Describe());
                    answer.Add(Pair("value", Value.List(descriptions)));
                    break;
                case "contains":
                    Space chosen = Catalog[int.Parse(((JsonNumber)Field(command, "space")).Text, CultureInfo.InvariantCulture)];
                    answer.Add(Pair("value", chosen.Contains(ToValue(Field(command, "value")))));
                    break;
                case "dtype":
                    answer.Add(Pair("value", DType.Parse((string)Field(command, "text")).Str));
                    break;
                case "echo":  // a value read into a Value and written back
                    answer.Add(Pair("value", ToValue(Field(command, "value"))));
                    break;
                case "equal":
                    Value left = ToValue(Field(command, "left")), right = ToValue(Field(command, "right"));
                    answer.Add(Pair("value", left.Equals(right)));
                    answer.Add(Pair("same_hash", left.GetHashCode() == right.GetHashCode()));
                    break;
                case "key_equal":  // two values as dict keys: one key under Python's ==? and a dict of both, refused or not
                    Value first = ToValue(Field(command, "left")), second = ToValue(Field(command, "right"));
                    answer.Add(Pair("value", Value.PythonKeyEquals(first, second)));
                    answer.Add(Pair("same_hash", Value.PythonKeys.GetHashCode(first) == Value.PythonKeys.GetHashCode(second)));
                    string refusal = null;
                    try
                    {
                        Value.Dict(new[] { new KeyValuePair<Value, Value>(first, 1L), new KeyValuePair<Value, Value>(second, 2L) });
                    }
                    catch (ArgumentException error)
                    {
                        refusal = error.Message;
                    }
                    answer.Add(Pair("refused", refusal));
                    break;
                case "repr":
                    answer.Add(Pair("value", ToValue(Field(command, "value")).Repr()));
                    break;
                case "native_echo":  // a value read into a Value, through a native gr_value and back
                    answer.Add(Pair("value", Native.NativeValues.RoundTrip(ToValue(Field(command, "value")))));
                    break;
                case "client":
                    var hosted = new List<IEnv>();
                    foreach (object kind in (List<object>)Field(command, "envs")) hosted.Add(Make((string)kind, null));
                    using (var client = new Client(new ClientOptions((string)Field(command, "endpoint")), hosted))
                    {
                        answer.Add(Pair("state", client.State.ToString()));
                        answer.Add(Pair("abi_version", Value.Int(Client.NativeAbiVersion)));
                        answer.Add(Pair("pending_env", Value.Int(client.PendingEnv)));
                        answer.Add(Pair("slots", Value.Int(client.Slots.Length)));
                        var nothing = new StepResult(Value.None, 0, false, false, null);
                        answer.Add(Pair("complete_unasked", Failure(() => client.CompleteStep(0, nothing))));
                        answer.Add(Pair("complete_other_env", Failure(() => client.CompleteStep(hosted.Count, nothing))));
                        answer.Add(Pair("complete_pending", Failure(() => client.CompleteStep(0, StepResult.Pending))));
                    }
                    break;
                case "log_sink":  // a client that finds no server, its log lines at level DEBUG sent to a C# sink
                    var lines = new List<Value>();
                    Client.SetLogSink((level, message) => { lock (lines) lines.Add(Value.Tuple(level.ToString(), message)); });
                    try
                    {
                        var quiet = new ClientOptions((string)Field(command, "endpoint")) { ConnectTimeout = 0.3, Reconnect = false, LogLevel = LogLevel.Debug };
                        using (var client = new Client(quiet, new IEnv[] { new ProbeEnv() }))
                        {
                            answer.Add(Pair("status", client.Run().ToString()));
                            answer.Add(Pair("error", client.Error));
                        }
                    }
                    finally
                    {
                        Client.SetLogSink(null);
                    }
                    lock (lines) answer.Add(Pair("lines", Value.List(lines)));
                    break;
                case "python_error":
                    string typeName = (string)Field(command, "dotnet");
                    Type dotnet = Type.GetType(typeName) ?? typeof(Value).Assembly.GetType(typeName);
                    if (dotnet == null) throw new ArgumentException("no .NET type " + typeName);
                    EnvException named = EnvException.From((Exception)Activator.CreateInstance(dotnet, (string)Field(command, "message")));
                    answer.Add(Pair("type", named.TypeName));
                    answer.Add(Pair("module", named.Module));
                    answer.Add(Pair("message", named.Message));
                    break;
                case "domain_client":
                    AppDomain domain = AppDomain.CreateDomain("reloaded");
                    var runner = (DomainRunner)domain.CreateInstanceAndUnwrap(typeof(DomainRunner).Assembly.FullName, typeof(DomainRunner).FullName);
                    answer.Add(Pair("state", runner.Serve((string)Field(command, "endpoint"))));
                    AppDomain.Unload(domain);
                    // then a client here that finds no server: its native log lines (DEBUG) must reach stderr, not
                    // the sink the unloaded domain had set
                    var alone = new ClientOptions((string)Field(command, "no_server")) { ConnectTimeout = 0.3, Reconnect = false, LogLevel = LogLevel.Debug };
                    using (var client = new Client(alone, new IEnv[] { new ProbeEnv() })) answer.Add(Pair("after", client.Run().ToString()));
                    break;
                case "close":
                    env.Close();
                    break;
                default:
                    throw new ArgumentException("unknown op " + op);
            }
        }

        // the exception `act` throws, as "Type: message", or null
        static string Failure(Action act)
        {
            try
            {
                act();
                return null;
            }
            catch (Exception error)
            {
                return error.GetType().Name + ": " + error.Message;
            }
        }

        static IEnv Make(string name, string renderMode)
        {
            if (name == "Probe") return new ProbeEnv(renderMode);
            if (name == "CartPole") return new CartPoleEnv();
            throw new ArgumentException("unknown env " + name + " (Probe or CartPole)");
        }

        // One space of each class, in the order of test_csharp.py's SPACE_CATALOG (the same spaces in Gymnasium).
        static readonly Space[] Catalog =
        {
            new BoxSpace(-1.5, 2.5, new[] { 2, 3 }, DType.Float64),
            new BoxSpace(new double[] { 0, -5 }, new double[] { 10, 5 }, DType.Int32),
            new BoxSpace(0, 255, new[] { 2, 2 }, DType.UInt8),
            new DiscreteSpace(5, 2, DType.Int32),
            new MultiDiscreteSpace(new long[] { 2, 3, 4, 5 }, new long[] { 0, 1, -1, 0 }, null, new[] { 2, 2 }),
            new MultiBinarySpace(new[] { 2, 3 }),
            new MultiBinarySpace(4),
            new TextSpace(5, 2, "abc"),
            new GraphSpace(new BoxSpace(0, 1, new[] { 3 }, DType.Float32), new DiscreteSpace(4)),
            new GraphSpace(new DiscreteSpace(2), null),
            new SequenceSpace(new DiscreteSpace(3), true),
            new OneOfSpace(new DiscreteSpace(2), new BoxSpace(-1, 1, new[] { 2 }, DType.Float32)),
            new TupleSpace(new DiscreteSpace(2), new DictSpace(DictSpace.Entry("b", new MultiBinarySpace(2)), DictSpace.Entry("a", new TextSpace(3)))),
        };

        static KeyValuePair<string, object> Pair(string key, object value)
        {
            return new KeyValuePair<string, object>(key, value);
        }

        static bool Has(object json, string key)
        {
            var entries = json as List<KeyValuePair<string, object>>;
            return entries != null && entries.Exists(entry => entry.Key == key);
        }

        static object FieldOr(object json, string key)
        {
            return Has(json, key) ? Field(json, key) : null;
        }

        // Field(json, null) checks that json is an object and returns it.
        static object Field(object json, string key)
        {
            var entries = json as List<KeyValuePair<string, object>>;
            if (entries == null) throw new ArgumentException("a command is a JSON object");
            if (key == null) return entries;
            foreach (var entry in entries)
            {
                if (entry.Key == key) return entry.Value;
            }
            throw new ArgumentException("the command has no \"" + key + "\"");
        }

        // -- the harness's exact value form ------------------------------------------------------------------

        static Value ToValue(object json)
        {
            if (json == null) return Value.None;
            if (json is bool) return Value.Bool((bool)json);
            if (json is string) return Value.String((string)json);
            var number = json as JsonNumber;
            if (number != null)
            {
                if (!number.IsInteger) throw new FormatException("floats travel as [\"f\", hex of the bits], not " + number.Text);
                return Value.Int(BigInteger.Parse(number.Text, CultureInfo.InvariantCulture));
            }
            var entries = json as List<KeyValuePair<string, object>>;
            if (entries != null)
            {
                var pairs = new List<KeyValuePair<string, Value>>();
                foreach (var entry in entries) pairs.Add(Value.Entry(entry.Key, ToValue(entry.Value)));
                return Value.Dict(pairs);
            }
            var items = (List<object>)json;
            string tag = items.Count > 0 ? items[0] as string : null;
            switch (tag)
            {
                case "f": return Value.Float(BitConverter.Int64BitsToDouble(unchecked((long)ulong.Parse((string)items[1], NumberStyles.HexNumber, CultureInfo.InvariantCulture))));
                case "i":
                    string hex = (string)items[1];
                    bool negative = hex.StartsWith("-", StringComparison.Ordinal);
                    var magnitude = BigInteger.Parse("0" + hex.TrimStart('-'), NumberStyles.HexNumber, CultureInfo.InvariantCulture);
                    return Value.Int(negative ? -magnitude : magnitude);
                case "b": return Value.Bytes(FromHex((string)items[1]));
                case "l": return Value.List(Rest(items, 1));
                case "t": return Value.Tuple(Rest(items, 1));
                case "d":
                    var keyed = new List<KeyValuePair<Value, Value>>();
                    for (int i = 1; i + 1 < items.Count; i += 2) keyed.Add(new KeyValuePair<Value, Value>(ToValue(items[i]), ToValue(items[i + 1])));
                    return Value.Dict(keyed);
                case "s": return Value.Scalar(DType.Parse((string)items[1]), FromHex((string)items[2]));
                case "a": return Value.Array(DType.Parse((string)items[1]), ToShape(items[2]), FromHex((string)items[3]));
                case "o": return Value.ObjectArray(ToShape(items[1]), Rest((List<object>)items[2], 0).ToArray());
                case "g": return Value.Graph(ToValue(items[1]), ToValue(items[2]), ToValue(items[3]));
                default: throw new FormatException("an array is a tagged value; unknown tag " + (tag ?? "(none)"));
            }
        }

        static List<Value> Rest(List<object> items, int from)
        {
            var values = new List<Value>();
            for (int i = from; i < items.Count; i++) values.Add(ToValue(items[i]));
            return values;
        }

        static int[] ToShape(object json)
        {
            var extents = (List<object>)json;
            var shape = new int[extents.Count];
            for (int i = 0; i < shape.Length; i++) shape[i] = int.Parse(((JsonNumber)extents[i]).Text, CultureInfo.InvariantCulture);
            return shape;
        }

        static byte[] FromHex(string hex)
        {
            var bytes = new byte[hex.Length / 2];
            for (int i = 0; i < bytes.Length; i++) bytes[i] = byte.Parse(hex.Substring(2 * i, 2), NumberStyles.HexNumber, CultureInfo.InvariantCulture);
            return bytes;
        }

        static string ToHex(byte[] bytes)
        {
            var builder = new StringBuilder(bytes.Length * 2);
            foreach (byte b in bytes) builder.Append(b.ToString("x2", CultureInfo.InvariantCulture));
            return builder.ToString();
        }

        // Writes an answer: its fields are strings, bools, nulls and Values.
        static void Write(StringBuilder builder, object item)
        {
            if (item == null) builder.Append("null");
            else if (item is bool) builder.Append((bool)item ? "true" : "false");
            else if (item is string) Json.WriteString(builder, (string)item);
            else if (item is Value) WriteValue(builder, (Value)item);
            else
            {
                builder.Append('{');
                var entries = (List<KeyValuePair<string, object>>)item;
                for (int i = 0; i < entries.Count; i++)
                {
                    if (i > 0) builder.Append(", ");
                    Json.WriteString(builder, entries[i].Key);
                    builder.Append(": ");
                    Write(builder, entries[i].Value);
                }
                builder.Append('}');
            }
        }

        static void WriteValue(StringBuilder builder, Value value)
        {
            switch (value.Kind)
            {
                case ValueKind.None: builder.Append("null"); return;
                case ValueKind.Bool: builder.Append(value.AsBool ? "true" : "false"); return;
                case ValueKind.String: Json.WriteString(builder, value.AsString); return;
                case ValueKind.Int:
                    BigInteger integer = value.AsInteger;
                    if (integer >= long.MinValue && integer <= long.MaxValue) builder.Append(integer.ToString(CultureInfo.InvariantCulture));
                    else builder.Append("[\"i\", \"").Append(integer.Sign < 0 ? "-" : "").Append(BigInteger.Abs(integer).ToString("x", CultureInfo.InvariantCulture).TrimStart('0')).Append("\"]");
                    return;
                case ValueKind.Float:
                    builder.Append("[\"f\", \"").Append(BitConverter.DoubleToInt64Bits(value.AsFloat).ToString("x16", CultureInfo.InvariantCulture)).Append("\"]");
                    return;
                case ValueKind.Bytes: builder.Append("[\"b\", \"").Append(ToHex(value.ToByteArray())).Append("\"]"); return;
                case ValueKind.Scalar:
                    builder.Append("[\"s\", \"").Append(value.DType.Str).Append("\", \"").Append(ToHex(value.ToByteArray())).Append("\"]");
                    return;
                case ValueKind.Array:
                    builder.Append("[\"a\", \"").Append(value.DType.Str).Append("\", ");
                    WriteShape(builder, value.Shape);
                    builder.Append(", \"").Append(ToHex(value.ToByteArray())).Append("\"]");
                    return;
                case ValueKind.ObjectArray:
                    builder.Append("[\"o\", ");
                    WriteShape(builder, value.Shape);
                    builder.Append(", [");
                    WriteItems(builder, value.Items, false);
                    builder.Append("]]");
                    return;
                case ValueKind.List:
                case ValueKind.Tuple:
                case ValueKind.Graph:
                    builder.Append(value.Kind == ValueKind.List ? "[\"l\"" : value.Kind == ValueKind.Tuple ? "[\"t\"" : "[\"g\"");
                    WriteItems(builder, value.Items, true);
                    builder.Append(']');
                    return;
                default:
                    bool stringKeys = true;
                    foreach (var entry in value.Entries) stringKeys &= entry.Key.Kind == ValueKind.String;
                    builder.Append(stringKeys ? "{" : "[\"d\"");
                    for (int i = 0; i < value.Entries.Count; i++)
                    {
                        if (i > 0 || !stringKeys) builder.Append(", ");
                        if (stringKeys) Json.WriteString(builder, value.Entries[i].Key.AsString);
                        else WriteValue(builder, value.Entries[i].Key);
                        builder.Append(stringKeys ? ": " : ", ");
                        WriteValue(builder, value.Entries[i].Value);
                    }
                    builder.Append(stringKeys ? '}' : ']');
                    return;
            }
        }

        static void WriteItems(StringBuilder builder, IReadOnlyList<Value> items, bool leadingComma)
        {
            for (int i = 0; i < items.Count; i++)
            {
                if (i > 0 || leadingComma) builder.Append(", ");
                WriteValue(builder, items[i]);
            }
        }

        static void WriteShape(StringBuilder builder, int[] shape)
        {
            builder.Append('[');
            for (int i = 0; i < shape.Length; i++) builder.Append(i > 0 ? ", " : "").Append(shape[i].ToString(CultureInfo.InvariantCulture));
            builder.Append(']');
        }
    }

    /// <summary>A client made in another AppDomain and left running there, for "domain_client".</summary>
    public sealed class DomainRunner : MarshalByRefObject
    {
        static Client kept;  // as a game object would hold it: not disposed when the domain goes

        public string Serve(string endpoint)
        {
            Client.SetLogSink((level, message) => Console.Error.WriteLine("the reloaded domain's sink: " + message));
            kept = new Client(new ClientOptions(endpoint) { LivenessTimeout = 60 }, new IEnv[] { new ProbeEnv() });
            kept.Start();
            DateTime deadline = DateTime.UtcNow.AddSeconds(60);
            DateTime? member = null;
            while (DateTime.UtcNow < deadline && kept.State < ClientState.Closed)
            {
                kept.Pump(0.05);
                if (member == null && kept.State == ClientState.Member) member = DateTime.UtcNow;
                if (member != null && DateTime.UtcNow - member.Value > TimeSpan.FromSeconds(1)) break;
            }
            return kept.State.ToString();
        }
    }
}
