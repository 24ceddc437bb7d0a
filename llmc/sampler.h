// sampler.h — a tiny RNG, a token from softmax(logits) (as llm.c's), sample printing.
// Not here: the forward passes that make the logits.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include "tokenizer.h"

// ----------------------------------------------------------------------------
// Sampling

// xorshift64* (Vigna); state must not be 0.
static inline uint64_t random_u64(uint64_t* state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 0x2545F4914F6CDD1Dull;
}
// Uniform in [0, 1), 24 random bits.
static inline float random_f32(uint64_t* state) { return (float)(random_u64(state) >> 40) / 16777216.0f; }

// Token from softmax(logits[0..V)): walk the CDF to coin in [0, 1). Padding ignored.
static inline int sample_softmax(const float* logits, int V, float coin) {
    float maxv = logits[0];
    for (int i = 1; i < V; i++) maxv = logits[i] > maxv ? logits[i] : maxv;
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp((double)(logits[i] - maxv));
    const double target = coin * sum;
    double cdf = 0.0;
    for (int i = 0; i < V; i++) {
        cdf += exp((double)(logits[i] - maxv));
        if (target < cdf) return i;
    }
    return V - 1;  // coin * sum rounded up past the last bucket
}

// Its text with a tokenizer, else its id.
static inline void print_sample_token(const Tokenizer* tok, int id) {
    if (tok && tok->init_ok) print_token(tok, (uint32_t)id);
    else printf("%d ", id);
}

// A chat run's prompt, before its sample's completion is printed.
static inline void print_sample_prompt(const Tokenizer* tok, const int* prompt, int n) {
    printf("prompt (the first val conversation, up to its answer):\n---\n");
    for (int i = 0; i < n; i++) print_sample_token(tok, prompt[i]);
    printf("\n---\n");
}

// Between "---" lines; tokens[0], the prompt, is not printed.
static inline void print_sample(const Tokenizer* tok, const int* tokens, int n) {
    printf("generated:\n---\n");
    for (int i = 1; i < n; i++) print_sample_token(tok, tokens[i]);
    printf("\n---\n");
    fflush(stdout);
}
