using System;
using System.Collections.Generic;
using System.Numerics;
using System.Threading;

namespace GymRemote
{
    /// <summary>
    /// Drives a <see cref="Client"/> as a game's main loop does: one <see cref="Client.Pump"/>(0) per simulated frame,
    /// and each step answered over two frames: the step is asked in one frame (the env's Step is not called yet; the
    /// client is told it is pending), and on the next frame the driver calls the env's Step and completes the step
    /// with its result or its error. Call <see cref="Tick"/> once per frame from the game's loop, or
    /// <see cref="Run"/> to simulate frames <see cref="FrameSeconds"/> apart until the client ends.
    /// </summary>
    public sealed class FramePacedDriver : IDisposable
    {
        readonly Deferred[] deferred;

        /// <summary>A driver of a new client for <paramref name="envs"/> (as a <see cref="GymRemote.Client"/> takes them).</summary>
        public FramePacedDriver(ClientOptions options, IList<IEnv> envs, double frameSeconds = 0.001)
        {
            if (envs == null) throw new ArgumentNullException("envs");
            if (!(frameSeconds >= 0 && frameSeconds < 3600)) throw new ArgumentOutOfRangeException("frameSeconds", "a frame lasts 0 to 3600 seconds, not " + frameSeconds);
            FrameSeconds = frameSeconds;
            deferred = new Deferred[envs.Count];
            for (int i = 0; i < deferred.Length; i++)
            {
                if (envs[i] == null) throw new ArgumentNullException("envs", "env " + i + " is null");
                deferred[i] = new Deferred(envs[i], this);
            }
            Client = new Client(options, deferred);
        }

        /// <summary>The client driven (its envs are the driver's wrappers of the envs given).</summary>
        public Client Client { get; }

        /// <summary>The simulated frames' spacing, for <see cref="Run"/>.</summary>
        public double FrameSeconds { get; }

        /// <summary>The number of frames so far.</summary>
        public long Frame { get; private set; }

        /// <summary>Opens the connection (<see cref="Client.Start"/>).</summary>
        public ClientStatus Start()
        {
            return Client.Start();
        }

        /// <summary>
        /// One frame: completes the step asked in an earlier frame (calling the env's Step now), then pumps once
        /// without waiting. The pump's status (<see cref="ClientStatus.Ok"/> while the client goes on).
        /// </summary>
        public ClientStatus Tick()
        {
            int awaited = Client.PendingEnv;
            if (awaited >= 0 && deferred[awaited].HasAction && deferred[awaited].AskedIn < Frame) deferred[awaited].Answer(Client, awaited);
            ClientStatus status = Client.Pump(0.0);
            Frame += 1;
            return status;
        }

        /// <summary>Starts, then runs a frame every <see cref="FrameSeconds"/> until the client ended; its final status.</summary>
        public ClientStatus Run()
        {
            ClientStatus status = Start();
            while (status == ClientStatus.Ok && Client.State < ClientState.Closed)
            {
                status = Tick();
                if (FrameSeconds > 0) Thread.Sleep(TimeSpan.FromSeconds(FrameSeconds));
            }
            return status;
        }

        /// <summary>Disposes the client.</summary>
        public void Dispose()
        {
            Client.Dispose();
        }

        // An env whose steps are answered on a later frame; everything else goes straight to the env.
        sealed class Deferred : IEnv
        {
            readonly IEnv env;
            readonly FramePacedDriver driver;
            Value action;

            public Deferred(IEnv env, FramePacedDriver driver)
            {
                this.env = env;
                this.driver = driver;
            }

            public bool HasAction
            {
                get { return action != null; }
            }

            public long AskedIn { get; private set; }

            public Space ObservationSpace
            {
                get { return env.ObservationSpace; }
            }

            public Space ActionSpace
            {
                get { return env.ActionSpace; }
            }

            public string ClassName
            {
                get { return env.ClassName; }
            }

            public Value Metadata
            {
                get { return env.Metadata; }
            }

            public string RenderMode
            {
                get { return env.RenderMode; }
            }

            public ResetResult Reset(BigInteger? seed, Value options)
            {
                return env.Reset(seed, options);
            }

            public StepResult Step(Value given)
            {
                action = given;
                AskedIn = driver.Frame;
                return StepResult.Pending;
            }

            // the env's step now, given to the client as the pending step's result or error
            public void Answer(Client client, int index)
            {
                Value taken = action;
                action = null;
                StepResult result;
                try
                {
                    result = env.Step(taken);
                    if (result == null || result.IsPending) throw new InvalidOperationException(env.ClassName + ".Step returned " + (result == null ? "null" : "StepResult.Pending") + " under a FramePacedDriver");
                }
                catch (Exception error)
                {
                    client.FailStep(index, error);
                    return;
                }
                try
                {
                    client.CompleteStep(index, result);
                }
                catch (Exception error)  // a result that cannot travel (a value with no C form): the learner hears why
                {
                    client.FailStep(index, error);
                }
            }

            public Value Render()
            {
                return env.Render();
            }

            public bool TryGetAttribute(string name, out Value value)
            {
                return env.TryGetAttribute(name, out value);
            }

            public bool TrySetAttribute(string name, Value value)
            {
                return env.TrySetAttribute(name, value);
            }

            public void Close()
            {
                env.Close();
            }
        }
    }
}
