using System;

namespace AOT
{
    /// <summary>
    /// Marks a static method that native code calls through a delegate. Unity's IL2CPP recognizes the attribute by
    /// its name (AOT.MonoPInvokeCallbackAttribute) and compiles a native entry point for the method; Mono and .NET
    /// ignore it. Defined here, internal, so that no engine assembly is needed and none clashes with it.
    /// </summary>
    [AttributeUsage(AttributeTargets.Method)]
    internal sealed class MonoPInvokeCallbackAttribute : Attribute
    {
        public MonoPInvokeCallbackAttribute(Type type)
        {
            Type = type;
        }

        /// <summary>The delegate type the method is called through.</summary>
        public Type Type { get; }
    }
}
