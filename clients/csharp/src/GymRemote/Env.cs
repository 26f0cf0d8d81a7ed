using System;
using System.Numerics;

namespace GymRemote
{
    /// <summary>What <see cref="IEnv.Reset"/> returns: the first observation and the info dict.</summary>
    public sealed class ResetResult
    {
        public ResetResult(Value observation, Value info)
        {
            if (observation == null) throw new ArgumentNullException("observation");
            Observation = observation;
            Info = info ?? Value.Dict();
        }

        public Value Observation { get; }

        /// <summary>A dict (an empty one when the env has nothing to say).</summary>
        public Value Info { get; }
    }

    /// <summary>
    /// What <see cref="IEnv.Step"/> returns, as Gymnasium's <c>(obs, reward, terminated, truncated, info)</c>; or
    /// <see cref="Pending"/> for a step answered later (over several frames) with <see cref="Client.CompleteStep"/>.
    /// </summary>
    public sealed class StepResult
    {
        /// <summary>
        /// Returned by <see cref="IEnv.Step"/> when the result comes later: the host then calls
        /// <see cref="Client.CompleteStep"/> (or <see cref="Client.FailStep"/>) for that env, within the learner's
        /// step timeout. The client answers nothing meanwhile.
        /// </summary>
        public static readonly StepResult Pending = new StepResult();

        StepResult()
        {
            Observation = Value.None;
            Info = Value.Dict();
            IsPending = true;
        }

        public StepResult(Value observation, double reward, bool terminated, bool truncated, Value info)
        {
            if (observation == null) throw new ArgumentNullException("observation");
            Observation = observation;
            Reward = reward;
            Terminated = terminated;
            Truncated = truncated;
            Info = info ?? Value.Dict();
        }

        public Value Observation { get; }

        public double Reward { get; }

        /// <summary>The episode ended in a terminal state.</summary>
        public bool Terminated { get; }

        /// <summary>The episode was cut short (a time limit).</summary>
        public bool Truncated { get; }

        /// <summary>A dict (an empty one when the env has nothing to say).</summary>
        public Value Info { get; }

        /// <summary>Whether this is <see cref="Pending"/>.</summary>
        public bool IsPending { get; }
    }

    /// <summary>
    /// An error an env raises, named as the Python exception the learner raises for it (docs/PROTOCOL.md §8):
    /// <c>ValueError</c>, <c>TypeError</c>, <c>AttributeError</c> ... in module <c>builtins</c> unless given.
    /// </summary>
    public class EnvException : Exception
    {
        public EnvException(string typeName, string message, string module = "builtins")
            : base(message)
        {
            if (string.IsNullOrEmpty(typeName)) throw new ArgumentException("an env error needs a type name", "typeName");
            TypeName = typeName;
            Module = module;
        }

        /// <summary>The Python exception type's name, e.g. "ValueError".</summary>
        public string TypeName { get; }

        /// <summary>The module of the exception type, e.g. "builtins".</summary>
        public string Module { get; }

        public static EnvException ValueError(string message)
        {
            return new EnvException("ValueError", message);
        }

        public static EnvException TypeError(string message)
        {
            return new EnvException("TypeError", message);
        }

        public static EnvException AssertionError(string message)
        {
            return new EnvException("AssertionError", message);
        }

        public static EnvException IndexError(string message)
        {
            return new EnvException("IndexError", message);
        }

        /// <summary>The AttributeError Python raises for a missing attribute: "'Class' object has no attribute 'name'".</summary>
        public static EnvException AttributeError(string className, string name)
        {
            return new EnvException("AttributeError", "'" + className + "' object has no attribute '" + name + "'");
        }

        /// <summary>
        /// The Python exception the learner raises for <paramref name="error"/>: an <see cref="EnvException"/> as it is;
        /// <see cref="ArgumentException"/> ValueError, <see cref="InvalidCastException"/> TypeError,
        /// <see cref="IndexOutOfRangeException"/> IndexError, <see cref="System.Collections.Generic.KeyNotFoundException"/>
        /// KeyError, <see cref="NotImplementedException"/> NotImplementedError, <see cref="OverflowException"/>
        /// OverflowError, <see cref="DivideByZeroException"/> ZeroDivisionError, <see cref="OutOfMemoryException"/>
        /// MemoryError; anything else RuntimeError, its message led by the .NET type ("System.InvalidOperationException: ...").
        /// </summary>
        public static EnvException From(Exception error)
        {
            if (error == null) throw new ArgumentNullException("error");
            var known = error as EnvException;
            if (known != null) return known;
            string type;
            if (error is ArgumentException) type = "ValueError";
            else if (error is InvalidCastException) type = "TypeError";
            else if (error is IndexOutOfRangeException) type = "IndexError";
            else if (error is System.Collections.Generic.KeyNotFoundException) type = "KeyError";
            else if (error is NotImplementedException) type = "NotImplementedError";
            else if (error is DivideByZeroException) type = "ZeroDivisionError";
            else if (error is OverflowException) type = "OverflowError";
            else if (error is OutOfMemoryException) type = "MemoryError";
            else return new EnvException("RuntimeError", error.GetType().FullName + ": " + error.Message);
            return new EnvException(type, error.Message);
        }

        public override string ToString()
        {
            return Module + "." + TypeName + ": " + Message;
        }
    }

    /// <summary>
    /// A Gymnasium env in C#: what a client serves to a RemoteVectorEnv, one instance per slot.
    /// Methods are called from one thread at a time. Errors are thrown as <see cref="EnvException"/>;
    /// any other exception is reported to the learner by its .NET type name.
    /// </summary>
    public interface IEnv
    {
        /// <summary>The space every observation belongs to.</summary>
        Space ObservationSpace { get; }

        /// <summary>The space every action belongs to.</summary>
        Space ActionSpace { get; }

        /// <summary>The env's class name as the learner sees it (in AttributeError messages, for example).</summary>
        string ClassName { get; }

        /// <summary>Gymnasium's <c>env.metadata</c>: a dict such as <c>{"render_modes": [...], "render_fps": 50}</c>.</summary>
        Value Metadata { get; }

        /// <summary>Gymnasium's <c>env.render_mode</c>, or null.</summary>
        string RenderMode { get; }

        /// <summary>
        /// Starts an episode. <paramref name="seed"/> is null for no seed (the env continues its random stream)
        /// and may exceed 64 bits; <paramref name="options"/> is null when the learner gave none, else a value
        /// (<see cref="Value.None"/> for an explicit None, usually a dict).
        /// </summary>
        ResetResult Reset(BigInteger? seed, Value options);

        /// <summary>Takes one step with <paramref name="action"/> (a value of <see cref="ActionSpace"/>).</summary>
        StepResult Step(Value action);

        /// <summary>What the env renders in its render mode (<see cref="Value.None"/> for nothing).</summary>
        Value Render();

        /// <summary>Reads an attribute of the env's own (CartPole's <c>state</c>); false when it has none of that name.</summary>
        bool TryGetAttribute(string name, out Value value);

        /// <summary>Sets an attribute of the env's own; false when it has none of that name (the caller then keeps the value).</summary>
        bool TrySetAttribute(string name, Value value);

        /// <summary>Releases what the env holds; it is not used afterwards.</summary>
        void Close();
    }

    /// <summary>A base for envs: no metadata, no render mode, nothing rendered, no attributes, nothing to close.</summary>
    public abstract class Env : IEnv
    {
        public abstract Space ObservationSpace { get; }

        public abstract Space ActionSpace { get; }

        public virtual string ClassName
        {
            get { return GetType().Name; }
        }

        public virtual Value Metadata
        {
            get { return Value.Dict(Value.Entry("render_modes", Value.List())); }
        }

        public virtual string RenderMode
        {
            get { return null; }
        }

        public abstract ResetResult Reset(BigInteger? seed, Value options);

        public abstract StepResult Step(Value action);

        /// <summary>Refuses a negative seed as Gymnasium's <c>Env.reset</c> does (gymnasium.error.Error).</summary>
        protected static void CheckSeed(BigInteger? seed)
        {
            if (seed.HasValue && seed.Value.Sign < 0)
            {
                throw new EnvException("Error", "Seed must be greater or equal to zero, actual value: " + seed.Value, "gymnasium.error");
            }
        }

        public virtual Value Render()
        {
            return Value.None;
        }

        public virtual bool TryGetAttribute(string name, out Value value)
        {
            value = null;
            return false;
        }

        public virtual bool TrySetAttribute(string name, Value value)
        {
            return false;
        }

        public virtual void Close()
        {
        }
    }
}
