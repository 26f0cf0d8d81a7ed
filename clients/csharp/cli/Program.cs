using System;
using System.Collections.Generic;
using System.Globalization;
using System.Threading;
using GymRemote.Envs;
using Mono.Unix;
using Mono.Unix.Native;

namespace GymRemote.Cli
{
    /// <summary>
    /// GymRemote.Client.exe: serves the C# probe env or CartPole to a RemoteVectorEnv, with the command line of
    /// gym_remote_probe_client_c (clients/cpp/examples/probe_client_c.c) plus --env. Exit statuses: 0 after the
    /// server closed, 1 failed, 2 bad usage, 130 SIGINT, 143 SIGTERM.
    /// </summary>
    public static class Program
    {
        const string Name = "GymRemote.Client.exe";
        static int signal;  // the signal that stopped the client (2 or 15), or 0

        public static int Main(string[] args)
        {
            var options = new ClientOptions(null);
            string env = "probe";
            int numEnvs = 1;
            bool framePaced = false;
            for (int i = 0; i < args.Length; i++)
            {
                string a = args[i];
                string value = i + 1 < args.Length ? args[i + 1] : null;
                switch (a)
                {
                    case "-h":
                    case "--help":
                        Usage(Console.Out);
                        return 0;
                    case "--frame-paced": framePaced = true; continue;
                    case "--no-reconnect": options.Reconnect = false; continue;
                    case "--exit-if-full": options.WaitForSlot = false; continue;
                    case "--no-data-plane": options.DataPlane = false; continue;
                }
                if (!a.StartsWith("--", StringComparison.Ordinal))
                {
                    if (options.Endpoint != null) return UsageError("unrecognized arguments: " + a);
                    options.Endpoint = a;
                    continue;
                }
                if (value == null) return UsageError("expected one argument after " + a);
                i++;
                double seconds;
                switch (a)
                {
                    case "--env":
                        if (value != "probe" && value != "cartpole") return UsageError("argument --env: invalid choice: " + value + " (choose from probe, cartpole)");
                        env = value;
                        break;
                    case "--num-envs":
                        if (!int.TryParse(value, NumberStyles.None, CultureInfo.InvariantCulture, out numEnvs) || numEnvs < 1 || numEnvs > 65535)
                        {
                            return UsageError("argument --num-envs: must be an int in 1..65535, got " + value);
                        }
                        break;
                    case "--name": options.Name = value; break;
                    case "--server-key": options.ServerKey = value; break;
                    case "--client-key": options.ClientKey = value; break;
                    case "--secret-file": options.SecretFile = value; break;
                    case "--log-level":
                        int level = Array.IndexOf(new[] { "DEBUG", "INFO", "WARNING", "ERROR" }, value);
                        if (level < 0) return UsageError("argument --log-level: invalid choice: " + value);
                        options.LogLevel = (LogLevel)level;
                        break;
                    case "--connect-timeout":
                    case "--slot-timeout":
                    case "--reconnect-timeout":
                    case "--liveness-timeout":
                    case "--spin":
                        if (!double.TryParse(value, NumberStyles.Float, CultureInfo.InvariantCulture, out seconds) || double.IsNaN(seconds) || double.IsInfinity(seconds) ||
                            seconds < 0 || (seconds == 0 && a != "--spin"))
                        {
                            return UsageError("invalid number of seconds: " + value);
                        }
                        if (a == "--connect-timeout") options.ConnectTimeout = seconds;
                        else if (a == "--slot-timeout") options.SlotTimeout = seconds;
                        else if (a == "--reconnect-timeout") options.ReconnectTimeout = seconds;
                        else if (a == "--liveness-timeout") options.LivenessTimeout = seconds;
                        else options.Spin = seconds;
                        break;
                    default:
                        return UsageError("unrecognized arguments: " + a);
                }
            }
            if (options.Endpoint == null) return UsageError("the following arguments are required: ENDPOINT");
            var envs = new List<IEnv>();
            for (int k = 0; k < numEnvs; k++) envs.Add(env == "probe" ? (IEnv)new ProbeEnv() : new CartPoleEnv());
            try
            {
                return Serve(options, envs, framePaced);
            }
            catch (ArgumentException error)
            {
                return UsageError(error.Message);
            }
            catch (Exception error)
            {
                Console.Error.WriteLine(Name + ": error: " + error.Message);
                return 1;
            }
        }

        static int Serve(ClientOptions options, List<IEnv> envs, bool framePaced)
        {
            FramePacedDriver driver = null;
            Client client;
            if (framePaced)
            {
                driver = new FramePacedDriver(options, envs);
                client = driver.Client;
            }
            else
            {
                client = new Client(options, envs);
            }
            using (client)
            {
                var watching = new ManualResetEvent(false);
                var watcher = WatchSignals(client, watching);
                ClientStatus status;
                try
                {
                    status = driver != null ? driver.Run() : client.Run();
                }
                finally
                {
                    watching.Set();
                    watcher.Join(1000);
                }
                if (status == ClientStatus.Ok) return 0;
                if (status == ClientStatus.Stopped) return Volatile.Read(ref signal) == 2 ? 130 : 143;
                Console.Error.WriteLine(Name + ": error: " + client.Error);
                return status == ClientStatus.InvalidArgument ? 2 : 1;
            }
        }

        static void Stop(Client client, int number)
        {
            Interlocked.CompareExchange(ref signal, number, 0);
            client.RequestStop();
        }

        // SIGINT and SIGTERM through Mono.Posix's UnixSignal, waited for on a thread of its own until `done` is set.
        // (Mono raises Console.CancelKeyPress only when its console is a terminal, so SIGINT goes this way too.)
        static Thread WatchSignals(Client client, ManualResetEvent done)
        {
            var signals = new[] { new UnixSignal(Signum.SIGINT), new UnixSignal(Signum.SIGTERM) };
            var thread = new Thread(() =>
            {
                try
                {
                    while (!done.WaitOne(0))
                    {
                        int which = UnixSignal.WaitAny(signals, 50);
                        if (which >= 0 && which < signals.Length)
                        {
                            Stop(client, which == 0 ? 2 : 15);
                            return;
                        }
                    }
                }
                finally
                {
                    foreach (UnixSignal watched in signals) watched.Dispose();
                }
            });
            thread.IsBackground = true;
            thread.Start();
            return thread;
        }

        static void Usage(System.IO.TextWriter output)
        {
            output.WriteLine("usage: " + Name + " [-h] [--env {probe,cartpole}] [--num-envs K] [--name NAME] [--liveness-timeout SECONDS]");
            output.WriteLine("       [--connect-timeout SECONDS] [--slot-timeout SECONDS] [--reconnect-timeout SECONDS]");
            output.WriteLine("       [--no-reconnect] [--exit-if-full] [--no-data-plane] [--spin SECONDS] [--server-key PATH]");
            output.WriteLine("       [--client-key PATH] [--secret-file PATH] [--log-level {DEBUG,INFO,WARNING,ERROR}]");
            output.WriteLine("       [--frame-paced] ENDPOINT");
        }

        static int UsageError(string message)
        {
            Usage(Console.Error);
            Console.Error.WriteLine(Name + ": error: " + message);
            return 2;
        }
    }
}
