/* The floor of the scale case: a ZeroMQ DEALER that answers every message at once, and nothing else.
 *
 *     echo_client ENDPOINT REPLY_BYTES...
 *
 * It connects to ENDPOINT, sends "ready", then answers each message it receives (all its frames read) with
 * one message of frames of REPLY_BYTES bytes each, until a message whose first frame is "stop".
 * benchmarks/scale.py builds it (cc echo_client.c -lzmq) and runs one per client. */
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int frames = argc - 2;
    size_t sizes[16];
    if (frames > 16) return 2;
    for (int i = 0; i < frames; i++) sizes[i] = (size_t)atol(argv[i + 2]);
    void *context = zmq_ctx_new();
    void *dealer = zmq_socket(context, ZMQ_DEALER);
    int linger = 0, timeout = 60000;
    zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(dealer, ZMQ_RCVTIMEO, &timeout, sizeof timeout); /* a learner gone for a minute ends it */
    if (zmq_connect(dealer, argv[1]) != 0) return 1;
    char reply[16][256] = {{0}};
    zmq_send(dealer, "ready", 5, 0);
    for (;;) {
        zmq_msg_t part;
        int first = 1, stop = 0, more = 1;
        while (more) {
            zmq_msg_init(&part);
            if (zmq_msg_recv(&part, dealer, 0) < 0) return 1;
            if (first && zmq_msg_size(&part) == 4 && memcmp(zmq_msg_data(&part), "stop", 4) == 0) stop = 1;
            first = 0;
            more = zmq_msg_more(&part);
            zmq_msg_close(&part);
        }
        if (stop) break;
        for (int i = 0; i < frames; i++)
            zmq_send(dealer, reply[i], sizes[i] < 256 ? sizes[i] : 256, i + 1 < frames ? ZMQ_SNDMORE : 0);
    }
    zmq_close(dealer);
    zmq_ctx_term(context);
    return 0;
}
