/* agentworld.proxy._chunks: streamed chat chunk events read in C (the proxy's hottest loop).
 *
 * A streamed chat call's events are most of what `aw proxy` does for it: each is
 * parsed, added to the assembler that rebuilds the answer for the record, and
 * (when the proxy asked for token ids or log-probs the agent did not) written
 * again without them. In Python that is ~35,000 instructions an event, mostly the
 * interpreter and the objects it makes (bench/proxy_instructions.py). Here one
 * call takes a whole upstream read: `Reader.read(events, start, parts)` walks
 * the events from `start`, and for each one it reads with certainty it
 *
 *  - appends what the agent must receive (the event as it came, or with the
 *    `logprobs` value of each choice made `null` and the `token_ids` and
 *    `prompt_token_ids` members cut out: surgery on the upstream's own bytes,
 *    never re-encoded, so the agent's copy keeps the upstream's key order and
 *    spacing where the Python path's is msgspec's; both parse to the same JSON);
 *  - makes on the assembler (`agentworld.proxy.sse.StreamAssembler`) the state
 *    `StreamAssembler.add_typed` makes of it, on the assembler's own objects.
 *
 * It stops at the first event it does not take and returns its position (and
 * whether `data: [DONE]` came); the caller reads that one the Python way, which
 * stays the definition, and calls again for the rest. What it takes is a subset
 * of what the typed Python reading (adapters/openai_chunks.py) takes, read the
 * same: one `data: ` line holding a JSON object with the fields vLLM sends for a
 * token and its usage (the fields OpenAI adds too, where nothing is stripped),
 * valid UTF-8, no duplicate keys, integers within 64 bits; not errors, tool
 * calls or reasoning. Anything else, or anything it cannot read with certainty,
 * is left to Python (never an exception).
 *
 * Measured (bench/proxy_instructions.py --modes stream --ablate noparse, a
 * 14-event vLLM answer with ids and log-probs): the call takes ~1.16M
 * instructions beside ~1.56M reading its events in Python and 1.10M not reading
 * them at all. Of a log-prob entry the assembled answer keeps the value alone
 * (all a record keeps of it): the number object, appended to the choice's
 * `LogprobValues`; the `{"logprob": v}` dict it made of each entry before cost
 * ~27k instructions a call (the call then: ~1.19M).
 *
 * Each event is parsed whole before anything is changed, so an event left to
 * Python has changed nothing. The choices' parts wait in the reader (their token
 * ids and log-probs as C values) and reach the assembler's `_Choice` objects once
 * a read for each choice index: the state Python would have made event by event,
 * with a few attribute operations a read instead of a dozen an event. Python runs
 * during a read only in `_Choice.__init__` (a dataclass's), which sees none of it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef unsigned char uchar;

enum { OK = 0, DECLINE = 1, ERROR = -1 };

#define MAX_EDITS 64   /* cuts and nulls in one event's copy: more, Python writes it */
#define MAX_DEPTH 64   /* nesting of a skipped value (a top log-prob's), past it Python */
#define FLUSH_RECS 64  /* choices waiting in the reader: past it, they go to the assembler */

/* Attribute and key names, interned once. */
static PyObject *s_top, *s_choices, *s_chunks, *s_prompt_token_ids, *s_content, *s_saw_content,
    *s_role, *s_logprobs, *s_token_ids, *s_finish_reason, *s_stop_reason, *s_id, *s_model,
    *s_created, *s_system_fingerprint, *s_append, *s_usage;

/* ------------------------------------------------------------------ the reader's state */

enum { V_NONE, V_INT, V_FLOAT };

typedef struct { /* a log-prob entry's value */
    int kind;
    int64_t i;
    double d;
} Value;

typedef struct { /* one choice of one event, waiting for the assembler */
    int64_t index;
    int done; /* by flush */
    PyObject *content, *role, *finish_reason, *stop_reason; /* owned, or NULL: absent or null */
    Py_ssize_t lp_start, lp_end;   /* its entries: lps[lp_start:lp_end]; -1: no list */
    Py_ssize_t ids_start, ids_end; /* its token ids: ids[ids_start:ids_end]; -1: no list */
} Choice;

typedef struct {
    PyObject_HEAD
    PyObject *asm_;       /* the StreamAssembler */
    PyObject *choice_cls; /* its _Choice */
    PyObject *values_cls; /* LogprobValues: a _Choice's `logprobs` */
    int strict;           /* a field the structs do not name sends the event to Python */
    int strip_ids;        /* cut `token_ids` and `prompt_token_ids` from the agent's copy */
    int null_logprobs;    /* each choice's `logprobs` written `null` there */
    Py_ssize_t max_payload;
    int busy;
    Choice *recs; /* this read's choices, in order */
    Py_ssize_t nrecs, cap_recs;
    Value *lps;
    Py_ssize_t nlps, cap_lps;
    int64_t *ids;
    Py_ssize_t nids, cap_ids;
} Reader;

static int
grow(void **buf, Py_ssize_t *cap, Py_ssize_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    Py_ssize_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *grown = PyMem_Realloc(*buf, n * size);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *buf = grown;
    *cap = n;
    return 0;
}

static void
clear_recs(Reader *R, Py_ssize_t keep)
{
    while (R->nrecs > keep) {
        Choice *c = &R->recs[--R->nrecs];
        Py_CLEAR(c->content);
        Py_CLEAR(c->role);
        Py_CLEAR(c->finish_reason);
        Py_CLEAR(c->stop_reason);
    }
}

/* ------------------------------------------------------------------ one event */

typedef struct {
    Py_ssize_t start, stop;
    int null; /* replace by `null` (else: cut) */
} Edit;

typedef struct {
    Reader *R;
    const uchar *base; /* the payload: edits are offsets into it */
    const uchar *p;
    const uchar *end;
    int top_empty; /* the assembler's top is empty: keep id, model, created */
    PyObject *id, *model, *created, *fingerprint, *prompt_ids, *usage;
    int nedits;
    Edit edits[MAX_EDITS];
} Parser;

static void
parser_clear(Parser *P)
{
    Py_CLEAR(P->id);
    Py_CLEAR(P->model);
    Py_CLEAR(P->created);
    Py_CLEAR(P->fingerprint);
    Py_CLEAR(P->prompt_ids);
    Py_CLEAR(P->usage);
}

/* ------------------------------------------------------------------ JSON scanning */

/* Byte classes. An event is a bytes object, whose bytes CPython ends with a NUL that is
 * in no class: the scanning loops stop there (or at a NUL inside, which no JSON holds)
 * without a bounds check, and P->p never passes P->end, where that NUL is. A newline,
 * JSON's whitespace but the end of an SSE line, is in none either: an event with one is
 * left to Python (one `data:` line is all this reads). */
#define B_WS 1
#define B_PLAIN 2 /* a string's byte that needs no attention: 0x20-0x7F but " and \ */
static uchar CLS[256];

static inline void
ws(Parser *P)
{
    const uchar *p = P->p;
    while (CLS[*p] & B_WS)
        p++;
    P->p = p;
}

static inline int
literal(Parser *P, const char *word, Py_ssize_t n)
{
    if (P->end - P->p < n || memcmp(P->p, word, n))
        return DECLINE;
    P->p += n;
    return OK;
}

/* 1 (and P->p past it) at a null, 0 at anything else, -1 at an n that starts no null. */
static inline int
is_null(Parser *P)
{
    if (*P->p != 'n')
        return 0;
    return literal(P, "null", 4) == OK ? 1 : -1;
}

static int
hex4(const uchar *p, const uchar *end, unsigned *out)
{
    unsigned v = 0;
    if (end - p < 4)
        return DECLINE;
    for (int i = 0; i < 4; i++) {
        uchar c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return DECLINE;
    }
    *out = v;
    return OK;
}

/* The length of the valid UTF-8 sequence of 2-4 bytes at p (RFC 3629: no overlong
 * forms, no surrogates, nothing past U+10FFFF), or 0. */
static int
utf8_len(const uchar *p, const uchar *end)
{
    uchar c = p[0];
    Py_ssize_t left = end - p;
    if (c < 0xC2)
        return 0;
    if (c < 0xE0) {
        if (left < 2 || (p[1] & 0xC0) != 0x80)
            return 0;
        return 2;
    }
    if (c < 0xF0) {
        uchar lo = 0x80, hi = 0xBF;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
        if (left < 3 || p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80)
            return 0;
        return 3;
    }
    if (c < 0xF5) {
        uchar lo = 0x80, hi = 0xBF;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
        if (left < 4 || p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80 ||
            (p[3] & 0xC0) != 0x80)
            return 0;
        return 4;
    }
    return 0;
}

#define F_ESCAPES 1
#define F_NONASCII 2

/* The rest of a string from p, past its plain bytes: escapes, non-ASCII, the end. */
static int
scan_string_rest(Parser *P, const uchar *s, const uchar *p, Py_ssize_t *n, int *flags)
{
    const uchar *end = P->end;
    int fl = 0;
    for (;;) {
        while (CLS[*p] & B_PLAIN)
            p++;
        if (p >= end)
            return DECLINE;
        uchar c = *p;
        if (c == '"')
            break;
        if (c == '\\') {
            fl |= F_ESCAPES;
            if (++p >= end)
                return DECLINE;
            switch (*p) {
            case '"':
            case '\\':
            case '/':
            case 'b':
            case 'f':
            case 'n':
            case 'r':
            case 't':
                p++;
                break;
            case 'u': {
                unsigned u, lo;
                if (hex4(p + 1, end, &u))
                    return DECLINE;
                p += 5;
                if (u >= 0xDC00 && u <= 0xDFFF)
                    return DECLINE; /* a low surrogate alone */
                if (u >= 0xD800 && u <= 0xDBFF) {
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, end, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF)
                        return DECLINE; /* a high surrogate alone */
                    p += 6;
                }
                break;
            }
            default:
                return DECLINE;
            }
        }
        else if (c < 0x80) {
            return DECLINE; /* a control character */
        }
        else {
            int k = utf8_len(p, end);
            if (!k)
                return DECLINE;
            fl |= F_NONASCII;
            p += k;
        }
    }
    *n = p - s;
    *flags = fl;
    P->p = p + 1;
    return OK;
}

/* The string at P->p (its opening quote): its raw contents s[0:n] and flags, P->p past
 * it. Declines what a JSON parser refuses (control characters, bad escapes, invalid
 * UTF-8) and lone surrogate escapes. */
static inline int
scan_string(Parser *P, const uchar **s, Py_ssize_t *n, int *flags)
{
    const uchar *p = P->p + 1;
    *s = p;
    while (CLS[*p] & B_PLAIN)
        p++;
    if (*p == '"') {
        *n = p - *s;
        *flags = 0;
        P->p = p + 1;
        return OK;
    }
    return scan_string_rest(P, *s, p, n, flags);
}

static char *
put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        *o++ = (char)cp;
    }
    else if (cp < 0x800) {
        *o++ = (char)(0xC0 | (cp >> 6));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | (cp >> 12));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    else {
        *o++ = (char)(0xF0 | (cp >> 18));
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

static int
decode_utf8(const char *s, Py_ssize_t n, PyObject **out)
{
    PyObject *u = PyUnicode_DecodeUTF8(s, n, NULL);
    if (u == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            return ERROR;
        PyErr_Clear(); /* not expected after scan_string: Python decides */
        return DECLINE;
    }
    *out = u;
    return OK;
}

/* The str of a string scanned by scan_string (escapes resolved as a JSON parser does). */
static int
make_str(const uchar *s, Py_ssize_t n, int flags, PyObject **out)
{
    if (!flags) {
        PyObject *u = PyUnicode_New(n, 127);
        if (u == NULL)
            return ERROR;
        memcpy(PyUnicode_DATA(u), s, n);
        *out = u;
        return OK;
    }
    if (!(flags & F_ESCAPES))
        return decode_utf8((const char *)s, n, out);
    /* Unescaped, a string is never longer than it was (\uXXXX: 6 bytes for at most 3,
     * a pair: 12 for 4). */
    char stack[256];
    char *buf = n <= (Py_ssize_t)sizeof stack ? stack : PyMem_Malloc(n);
    if (buf == NULL) {
        PyErr_NoMemory();
        return ERROR;
    }
    char *o = buf;
    const uchar *p = s, *end = s + n;
    while (p < end) {
        uchar c = *p;
        if (c != '\\') {
            *o++ = (char)c;
            p++;
            continue;
        }
        c = p[1];
        p += 2;
        switch (c) {
        case 'b':
            *o++ = '\b';
            break;
        case 'f':
            *o++ = '\f';
            break;
        case 'n':
            *o++ = '\n';
            break;
        case 'r':
            *o++ = '\r';
            break;
        case 't':
            *o++ = '\t';
            break;
        case 'u': {
            unsigned u = 0, lo = 0;
            hex4(p, end, &u); /* checked by scan_string */
            p += 4;
            if (u >= 0xD800 && u <= 0xDBFF) {
                hex4(p + 2, end, &lo);
                p += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            o = put_utf8(o, u);
            break;
        }
        default: /* " \ / */
            *o++ = (char)c;
        }
    }
    int rc = decode_utf8(buf, o - buf, out);
    if (buf != stack)
        PyMem_Free(buf);
    return rc;
}

/* A string, or null (*out stays NULL). */
static inline int
str_or_null(Parser *P, PyObject **out)
{
    const uchar *s;
    Py_ssize_t n;
    int flags;
    int nul = is_null(P);
    if (nul)
        return nul > 0 ? OK : DECLINE;
    if (*P->p != '"' || scan_string(P, &s, &n, &flags))
        return DECLINE;
    return make_str(s, n, flags, out);
}

/* A string or null, checked, not kept. */
static inline int
check_str_or_null(Parser *P)
{
    const uchar *s;
    Py_ssize_t n;
    int flags;
    int nul = is_null(P);
    if (nul)
        return nul > 0 ? OK : DECLINE;
    if (*P->p != '"' || scan_string(P, &s, &n, &flags))
        return DECLINE;
    return OK;
}

typedef struct {
    const uchar *start;
    int isint;     /* no fraction, no exponent */
    int fits;      /* an integer within int64 */
    int nonzero;   /* a digit other than 0 before any exponent */
    int64_t value; /* when isint and fits */
} Number;

#define DIGIT(c) ((unsigned)((c) - '0') < 10)

/* A number at P->p, JSON's grammar checked; P->p past it. */
static int
scan_number(Parser *P, Number *num)
{
    const uchar *p = P->p;
    int neg = 0, nonzero = 0;
    uint64_t mag = 0;
    num->start = p;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    const uchar *digits = p;
    if (*p == '0') {
        p++;
    }
    else if (DIGIT(*p)) {
        nonzero = 1;
        while (DIGIT(*p))
            mag = mag * 10 + (*p++ - '0'); /* exact up to 19 digits; more: not an int64 */
    }
    else {
        return DECLINE;
    }
    Py_ssize_t ndigits = p - digits;
    int isint = 1;
    if (*p == '.') {
        isint = 0;
        p++;
        if (!DIGIT(*p))
            return DECLINE;
        while (DIGIT(*p))
            nonzero |= *p++ != '0';
    }
    if (*p == 'e' || *p == 'E') {
        isint = 0;
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!DIGIT(*p))
            return DECLINE;
        while (DIGIT(*p))
            p++;
    }
    num->isint = isint;
    num->nonzero = nonzero;
    num->fits = 0;
    if (isint && ndigits <= 19) {
        if (neg && mag <= (uint64_t)INT64_MAX + 1) {
            num->fits = 1;
            num->value = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
        }
        else if (!neg && mag <= (uint64_t)INT64_MAX) {
            num->fits = 1;
            num->value = (int64_t)mag;
        }
    }
    P->p = p;
    return OK;
}

static int
scan_int_slow(Parser *P, int64_t *v)
{
    Number num;
    if (scan_number(P, &num) || !num.isint || !num.fits)
        return DECLINE;
    *v = num.value;
    return OK;
}

/* An integer within int64 (token ids, an index: most are short and not negative). */
static inline int
scan_int(Parser *P, int64_t *v)
{
    const uchar *p = P->p;
    if (DIGIT(*p)) {
        uint64_t m = *p++ - '0';
        if (m) {
            while (DIGIT(*p) && m < 100000000000000000u) /* to 18 digits: no overflow */
                m = m * 10 + (*p++ - '0');
        }
        if (!DIGIT(*p) && *p != '.' && *p != 'e' && *p != 'E') {
            *v = (int64_t)m;
            P->p = p;
            return OK;
        }
    }
    return scan_int_slow(P, v);
}

#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
#define FAST_DECIMAL 1
static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                               1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                               1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
#else
#define FAST_DECIMAL 0
#endif

/* A number as msgspec's `Any` reads it: an int (within 64 bits), or a float correctly
 * rounded; overflow and underflow go to Python. In one pass: the digits (to 19) make m,
 * the value m * 10^scale. Where m <= 2^53 and |scale| <= 22 that is one product or
 * quotient of two doubles, which IEEE arithmetic rounds correctly (Clinger's fast
 * path); elsewhere CPython's own dtoa converts it, as float() does. */
static int
scan_value(Parser *P, Value *v)
{
    const uchar *p = P->p, *start = p;
    uint64_t m = 0;
    int digits = 0, scale = 0, nonzero = 0, isint = 1, neg = *p == '-';
    p += neg;
    if (*p == '0') {
        p++;
    }
    else if (DIGIT(*p)) {
        for (; DIGIT(*p); p++) {
            if (++digits <= 19)
                m = m * 10 + (*p - '0');
        }
        nonzero = 1;
    }
    else {
        return DECLINE;
    }
    if (*p == '.') {
        isint = 0;
        if (!DIGIT(*++p))
            return DECLINE;
        for (; DIGIT(*p); p++) {
            nonzero |= *p != '0';
            if ((m || *p != '0') && ++digits > 19)
                continue;
            m = m * 10 + (*p - '0');
            scale--;
        }
    }
    if (*p == 'e' || *p == 'E') {
        int sign = 1, e = 0;
        isint = 0;
        p++;
        if (*p == '+' || *p == '-')
            sign = *p++ == '-' ? -1 : 1;
        if (!DIGIT(*p))
            return DECLINE;
        for (; DIGIT(*p); p++)
            if (e < 100000)
                e = e * 10 + (*p - '0');
        scale += sign * e;
    }
    P->p = p;
    if (isint) {
        if (digits > 19 || (digits == 19 && m > (uint64_t)INT64_MAX + neg))
            return DECLINE;
        v->kind = V_INT;
        v->i = neg ? (int64_t)(0 - m) : (int64_t)m;
        return OK;
    }
    v->kind = V_FLOAT;
#if FAST_DECIMAL
    if (m == 0 && !nonzero) {
        v->d = neg ? -0.0 : 0.0;
        return OK;
    }
    if (digits <= 19 && m <= (UINT64_C(1) << 53) && scale >= -22 && scale <= 22) {
        double d = scale < 0 ? (double)m / POW10[-scale] : (double)m * POW10[scale];
        v->d = neg ? -d : d;
        return OK;
    }
#endif
    char *stop;
    /* The payload ends in the bytes object's NUL, and what follows a JSON number is no
     * part of one: the conversion ends where the grammar did (checked). */
    double d = PyOS_string_to_double((const char *)start, &stop, NULL);
    if (d == -1.0 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError))
            return ERROR;
        PyErr_Clear();
        return DECLINE;
    }
    if ((const uchar *)stop != p || !isfinite(d))
        return DECLINE;
    if (d == 0.0 ? nonzero : fabs(d) < DBL_MIN)
        return DECLINE; /* underflow, or a subnormal */
    v->d = d;
    return OK;
}

/* Past a container's opening byte and the whitespace after: 1 if it holds items, 0 (and
 * past `close`) if it is empty. */
static inline int
open_items(Parser *P, int close)
{
    P->p++;
    ws(P);
    if (*P->p == close) {
        P->p++;
        return 0;
    }
    return 1;
}

/* After an item's value: on to the next item (1), past the container's `close` (0), or
 * not JSON (-1). */
static inline int
after_item(Parser *P, int close)
{
    ws(P);
    int c = *P->p;
    if (c == ',') {
        P->p++;
        ws(P);
        return 1;
    }
    if (c == close) {
        P->p++;
        return 0;
    }
    return -1;
}

/* Any JSON value, checked and skipped. */
static int
skip_value(Parser *P, int depth)
{
    const uchar *s;
    Py_ssize_t n;
    int flags, more;
    Number num;
    if (depth > MAX_DEPTH)
        return DECLINE;
    switch (*P->p) {
    case '"':
        return scan_string(P, &s, &n, &flags);
    case 't':
        return literal(P, "true", 4);
    case 'f':
        return literal(P, "false", 5);
    case 'n':
        return literal(P, "null", 4);
    case '[':
        for (more = open_items(P, ']'); more > 0; more = after_item(P, ']'))
            if (skip_value(P, depth + 1))
                return DECLINE;
        return more < 0 ? DECLINE : OK;
    case '{':
        for (more = open_items(P, '}'); more > 0; more = after_item(P, '}')) {
            if (*P->p != '"' || scan_string(P, &s, &n, &flags))
                return DECLINE;
            ws(P);
            if (*P->p != ':')
                return DECLINE;
            P->p++;
            ws(P);
            if (skip_value(P, depth + 1))
                return DECLINE;
        }
        return more < 0 ? DECLINE : OK;
    default:
        return scan_number(P, &num);
    }
}

/* skip_value, inline for what log-prob entries hold: a short string, [], [int, ...]. */
static inline int
skip(Parser *P, int depth)
{
    const uchar *p = P->p, *q;
    if (*p == '"') {
        for (q = p + 1; CLS[*q] & B_PLAIN; q++)
            ;
        if (*q == '"') {
            P->p = q + 1;
            return OK;
        }
    }
    else if (*p == '[') {
        if (p[1] == ']') {
            P->p = p + 2;
            return OK;
        }
        for (q = p + 1;;) { /* compact non-negative ints; anything else the long way */
            if (!DIGIT(*q) || (*q == '0' && DIGIT(q[1])))
                break;
            while (DIGIT(*q))
                q++;
            if (*q == ',') {
                q++;
                continue;
            }
            if (*q == ']') {
                P->p = q + 1;
                return OK;
            }
            break;
        }
    }
    return skip_value(P, depth);
}

/* Any JSON value as msgspec's `Any` reads it (a usage object): dicts, lists, str, int
 * (64-bit), float, bool, None. A key twice in an object goes to Python. */
static int
make_any(Parser *P, int depth, PyObject **out)
{
    const uchar *s;
    Py_ssize_t n;
    int flags, rc, more;
    Value v;
    PyObject *obj, *key, *item;
    if (depth > MAX_DEPTH)
        return DECLINE;
    switch (*P->p) {
    case '"':
        if (scan_string(P, &s, &n, &flags))
            return DECLINE;
        return make_str(s, n, flags, out);
    case 't':
        if (literal(P, "true", 4))
            return DECLINE;
        *out = Py_NewRef(Py_True);
        return OK;
    case 'f':
        if (literal(P, "false", 5))
            return DECLINE;
        *out = Py_NewRef(Py_False);
        return OK;
    case 'n':
        if (literal(P, "null", 4))
            return DECLINE;
        *out = Py_NewRef(Py_None);
        return OK;
    case '[':
        if ((obj = PyList_New(0)) == NULL)
            return ERROR;
        item = NULL;
        rc = OK;
        for (more = open_items(P, ']'); more > 0; more = after_item(P, ']')) {
            if ((rc = make_any(P, depth + 1, &item)) ||
                (rc = PyList_Append(obj, item) < 0 ? ERROR : OK))
                break;
            Py_CLEAR(item);
        }
        if (!rc && more < 0)
            rc = DECLINE;
        if (!rc) {
            *out = obj;
            return OK;
        }
        Py_XDECREF(item);
        Py_DECREF(obj);
        return rc;
    case '{':
        if ((obj = PyDict_New()) == NULL)
            return ERROR;
        key = item = NULL;
        rc = OK;
        for (more = open_items(P, '}'); more > 0; more = after_item(P, '}')) {
            rc = DECLINE;
            if (*P->p != '"' || scan_string(P, &s, &n, &flags) ||
                (rc = make_str(s, n, flags, &key)))
                break;
            ws(P);
            if (*P->p != ':' || (rc = PyDict_Contains(obj, key)) != 0) {
                rc = rc < 0 ? ERROR : DECLINE;
                break;
            }
            P->p++;
            ws(P);
            if ((rc = make_any(P, depth + 1, &item)) ||
                (rc = PyDict_SetItem(obj, key, item) < 0 ? ERROR : OK))
                break;
            Py_CLEAR(key);
            Py_CLEAR(item);
        }
        if (!rc && more < 0)
            rc = DECLINE;
        if (!rc) {
            *out = obj;
            return OK;
        }
        Py_XDECREF(key);
        Py_XDECREF(item);
        Py_DECREF(obj);
        return rc;
    default:
        if ((rc = scan_value(P, &v)))
            return rc;
        *out = v.kind == V_INT ? PyLong_FromLongLong(v.i) : PyFloat_FromDouble(v.d);
        return *out ? OK : ERROR;
    }
}

/* An array of integers at P->p, appended to the reader's ids from *start. */
static int
scan_ints(Parser *P, Py_ssize_t *start)
{
    Reader *R = P->R;
    int64_t v;
    int more;
    if (*P->p != '[')
        return DECLINE;
    *start = R->nids;
    for (more = open_items(P, ']'); more > 0; more = after_item(P, ']')) {
        if (scan_int(P, &v))
            return DECLINE;
        if (R->nids == R->cap_ids &&
            grow((void **)&R->ids, &R->cap_ids, R->nids + 1, sizeof *R->ids) < 0)
            return ERROR;
        R->ids[R->nids++] = v;
    }
    return more < 0 ? DECLINE : OK;
}

static PyObject *
int_list(const int64_t *v, Py_ssize_t n)
{
    PyObject *list = PyList_New(n);
    if (list == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (x == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, x);
    }
    return list;
}

/* ------------------------------------------------------------------ the agent's copy */

static int
add_edit(Parser *P, const uchar *start, const uchar *stop, int null)
{
    Py_ssize_t a = start - P->base, b = stop - P->base;
    if (!null && P->nedits) {
        Edit *last = &P->edits[P->nedits - 1];
        if (!last->null && a <= last->stop) { /* consecutive cuts: one */
            if (b > last->stop)
                last->stop = b;
            return OK;
        }
    }
    if (P->nedits == MAX_EDITS)
        return DECLINE;
    P->edits[P->nedits++] = (Edit){a, b, null};
    return OK;
}

/* Cut the member from `key` (its opening quote) to `vend` (the end of its value); P->p
 * is at what follows the value (after whitespace): ',' or '}'. Cut with it the comma
 * before it (after `kept_end`, the last member kept), or, when no member before it was
 * kept, the comma after it. */
static int
cut_member(Parser *P, const uchar *kept_end, const uchar *key, const uchar *vend)
{
    if (kept_end != NULL)
        return add_edit(P, kept_end, vend, 0);
    if (*P->p == ',') {
        const uchar *q = P->p + 1;
        while (CLS[*q] & B_WS)
            q++;
        return add_edit(P, key, q, 0);
    }
    return add_edit(P, key, vend, 0);
}

/* ------------------------------------------------------------------ objects */

/* The key at P->p, and P->p past its colon and the whitespace after. A key with an escape
 * might spell a field's name otherwise: Python reads those. */
static inline int
read_key(Parser *P, const uchar **s, Py_ssize_t *n)
{
    const uchar *p = P->p, *q;
    if (*p != '"')
        return DECLINE;
    q = p + 1;
    while (CLS[*q] & B_PLAIN)
        q++;
    if (*q == '"') {
        *s = p + 1;
        *n = q - (p + 1);
        p = q + 1;
    }
    else {
        int flags;
        if (scan_string_rest(P, p + 1, q, n, &flags) || (flags & F_ESCAPES))
            return DECLINE;
        *s = p + 1;
        p = P->p;
    }
    while (CLS[*p] & B_WS)
        p++;
    if (*p != ':')
        return DECLINE;
    p++;
    while (CLS[*p] & B_WS)
        p++;
    P->p = p;
    return OK;
}

/* At a key: 1 if it is `lit` (quoted), and P->p past its colon and the whitespace after;
 * 0 (P->p unmoved) if not. A constant `lit` makes the memcmp a compare or two. */
#define KEY(lit) key_is(P, "\"" lit "\"", sizeof(lit) + 1)
/* The first letter of the key at P->p (or 0): which KEYs to try. */
#define FIRST (*P->p == '"' ? P->p[1] : 0)

static inline int
key_is(Parser *P, const char *lit, Py_ssize_t n)
{
    const uchar *p = P->p;
    if (P->end - p <= n || memcmp(p, lit, n))
        return 0;
    p += n;
    while (CLS[*p] & B_WS)
        p++;
    if (*p != ':')
        return 0;
    p++;
    while (CLS[*p] & B_WS)
        p++;
    P->p = p;
    return 1;
}

/* The key s[0:n] is `lit` (a constant: the compiler makes the memcmp a compare or two). */
#define IS(lit) (n == sizeof(lit) - 1 && !memcmp(s, lit, sizeof(lit) - 1))

/* An object's members: the helpers above with its `}`. */
#define open_object(P) open_items(P, '}')
#define after_member(P) after_item(P, '}')

/* Matches the literal `lit` at p (within the payload), and moves past it. */
#define LIT(lit) (P->end - p >= (Py_ssize_t)sizeof(lit) - 1 && !memcmp(p, lit, sizeof(lit) - 1) \
                  ? (p += sizeof(lit) - 1, 1) : 0)

/* vLLM's entry as it writes it, {"token":"…","logprob":…,"bytes":[…],"top_logprobs":[]},
 * read straight through: 1 if it was one (its value in *v), 0 if not (P->p unmoved: the
 * general reading takes it, and any error it meets). */
static inline int
entry_fast(Parser *P, Value *v)
{
    const uchar *start = P->p, *p = start;
    if (!LIT("{\"token\":\""))
        return 0;
    while (CLS[*p] & B_PLAIN)
        p++;
    if (*p != '"')
        return 0;
    p++;
    if (!LIT(",\"logprob\":") || *p == 'n')
        return 0;
    P->p = p;
    if (scan_value(P, v) != OK) {
        PyErr_Clear(); /* (a MemoryError, if any, again in the general reading) */
        P->p = start;
        return 0;
    }
    p = P->p;
    if (!LIT(",\"bytes\":["))
        goto no;
    if (*p != ']') {
        for (;;) {
            if (!DIGIT(*p) || (*p == '0' && DIGIT(p[1])))
                goto no;
            while (DIGIT(*p))
                p++;
            if (*p != ',')
                break;
            p++;
        }
        if (*p != ']')
            goto no;
    }
    p++;
    if (!LIT(",\"top_logprobs\":[]}"))
        goto no;
    P->p = p;
    return 1;
no:
    P->p = start;
    return 0;
}

/* A log-prob entry: its `logprob` (a number or null; absent: null, as msgspec's Entry),
 * the rest checked and skipped. */
static int
parse_entry(Parser *P)
{
    Reader *R = P->R;
    Value v = {V_NONE, 0, 0.0};
    const uchar *s;
    Py_ssize_t n;
    int rc, seen = 0, more, k;
    if (entry_fast(P, &v))
        goto done;
    if (*P->p != '{')
        return DECLINE;
    for (more = open_object(P); more > 0; more = after_member(P)) {
        switch (FIRST) {
        case 'l':
            k = KEY("logprob");
            break;
        case 't':
            k = KEY("token") || KEY("top_logprobs") ? 2 : 0;
            break;
        case 'b':
            k = KEY("bytes") ? 2 : 0;
            break;
        default:
            k = 0;
        }
        if (k == 1) {
            int nul = is_null(P);
            if (seen++ || nul < 0)
                return DECLINE;
            if (!nul && (rc = scan_value(P, &v)))
                return rc;
            continue;
        }
        if (!k) {
            if ((rc = read_key(P, &s, &n)))
                return rc;
            if (IS("logprob"))
                return DECLINE;
        }
        if ((rc = skip(P, 3)))
            return rc;
    }
    if (more < 0)
        return DECLINE;
done:
    if (R->nlps == R->cap_lps &&
        grow((void **)&R->lps, &R->cap_lps, R->nlps + 1, sizeof *R->lps) < 0)
        return ERROR;
    R->lps[R->nlps++] = v;
    return OK;
}

/* A choice's `logprobs` object: its `content` entries into the reader (the rest, such as
 * OpenAI's `refusal`, skipped, as msgspec's Logprobs does). */
static int
parse_logprobs(Parser *P, Choice *c)
{
    const uchar *s;
    Py_ssize_t n;
    int rc, seen = 0, more, items;
    if (*P->p != '{')
        return DECLINE;
    for (more = open_object(P); more > 0; more = after_member(P)) {
        if (!KEY("content")) {
            if ((rc = read_key(P, &s, &n)))
                return rc;
            if (IS("content"))
                return DECLINE;
            if ((rc = skip(P, 3)))
                return rc;
            continue;
        }
        int nul = is_null(P);
        if (seen++ || nul < 0)
            return DECLINE;
        if (nul)
            continue;
        if (*P->p != '[')
            return DECLINE;
        c->lp_start = P->R->nlps;
        for (items = open_items(P, ']'); items > 0; items = after_item(P, ']'))
            if ((rc = parse_entry(P)))
                return rc;
        if (items < 0)
            return DECLINE;
        c->lp_end = P->R->nlps;
    }
    return more < 0 ? DECLINE : OK;
}

static int
parse_delta(Parser *P, Choice *c, int strict)
{
    const uchar *s;
    Py_ssize_t n;
    int rc, seen = 0, more, k;
    for (more = open_object(P); more > 0; more = after_member(P)) {
        switch (FIRST) {
        case 'c':
            k = KEY("content") ? 1 : 0;
            break;
        case 'r':
            k = KEY("role") ? 2 : KEY("reasoning") ? 4 : KEY("reasoning_content") ? 8 : 0;
            break;
        case 't':
            k = KEY("tool_calls") ? 16 : 0;
            break;
        default:
            k = 0;
        }
        if (!k) {
            if ((rc = read_key(P, &s, &n)))
                return rc;
            if (IS("content") || IS("role") || IS("reasoning") || IS("reasoning_content") ||
                IS("tool_calls"))
                return DECLINE;
        }
        if (seen & k)
            return DECLINE;
        seen |= k;
        switch (k) {
        case 1:
            rc = str_or_null(P, &c->content);
            break;
        case 2:
            rc = str_or_null(P, &c->role);
            break;
        case 4:
        case 8:
        case 16: /* Python reads these; null changes nothing */
            rc = is_null(P) > 0 ? OK : DECLINE;
            break;
        default:
            rc = strict ? DECLINE : skip_value(P, 3);
        }
        if (rc)
            return rc;
    }
    return more < 0 ? DECLINE : OK;
}

enum { C_INDEX = 1, C_DELTA = 2, C_LOGPROBS = 4, C_FINISH = 8, C_STOP = 16, C_TOKEN_IDS = 32 };

static int
parse_choice(Parser *P, Choice *c)
{
    Reader *R = P->R;
    const uchar *s, *key, *v, *vend, *kept_end = NULL;
    Py_ssize_t n;
    int rc, seen = 0, more, k, nul;
    if (*P->p != '{')
        return DECLINE;
    for (more = open_object(P); more > 0; more = after_member(P)) {
        key = P->p;
        switch (FIRST) {
        case 'i':
            k = KEY("index") ? C_INDEX : 0;
            break;
        case 'd':
            k = KEY("delta") ? C_DELTA : 0;
            break;
        case 'l':
            k = KEY("logprobs") ? C_LOGPROBS : 0;
            break;
        case 'f':
            k = KEY("finish_reason") ? C_FINISH : 0;
            break;
        case 's':
            k = KEY("stop_reason") ? C_STOP : 0;
            break;
        case 't':
            k = KEY("token_ids") ? C_TOKEN_IDS : 0;
            break;
        default:
            k = 0;
        }
        if (!k) {
            if ((rc = read_key(P, &s, &n)))
                return rc;
            if (IS("index") || IS("delta") || IS("logprobs") || IS("finish_reason") ||
                IS("stop_reason") || IS("token_ids"))
                return DECLINE;
        }
        if (seen & k)
            return DECLINE;
        seen |= k;
        v = P->p;
        switch (k) {
        case C_INDEX:
            rc = scan_int(P, &c->index);
            break;
        case C_DELTA:
            nul = is_null(P);
            if (nul)
                rc = nul > 0 ? OK : DECLINE;
            else
                rc = *P->p == '{' ? parse_delta(P, c, R->strict) : DECLINE;
            break;
        case C_LOGPROBS:
            nul = is_null(P);
            if (nul)
                rc = nul > 0 ? OK : DECLINE;
            else if (!(rc = parse_logprobs(P, c)) && R->null_logprobs)
                rc = add_edit(P, v, P->p, 1);
            break;
        case C_FINISH:
            rc = str_or_null(P, &c->finish_reason);
            break;
        case C_STOP:
            if (*P->p == '"' || *P->p == 'n') {
                rc = str_or_null(P, &c->stop_reason);
            }
            else {
                int64_t i;
                rc = scan_int(P, &i);
                if (!rc && (c->stop_reason = PyLong_FromLongLong(i)) == NULL)
                    rc = ERROR;
            }
            break;
        case C_TOKEN_IDS:
            nul = is_null(P);
            if (nul < 0)
                rc = DECLINE;
            else if (nul)
                rc = OK;
            else if (!(rc = scan_ints(P, &c->ids_start)))
                c->ids_end = R->nids;
            break;
        default:
            rc = R->strict ? DECLINE : skip_value(P, 2);
        }
        if (rc)
            return rc;
        vend = P->p;
        ws(P);
        if (k == C_TOKEN_IDS && R->strip_ids) {
            if ((rc = cut_member(P, kept_end, key, vend)))
                return rc;
        }
        else {
            kept_end = vend;
        }
    }
    return more < 0 ? DECLINE : OK;
}

static int
parse_choices(Parser *P)
{
    Reader *R = P->R;
    int rc, more, nul = is_null(P);
    if (nul)
        return nul > 0 ? OK : DECLINE;
    if (*P->p != '[')
        return DECLINE;
    for (more = open_items(P, ']'); more > 0; more = after_item(P, ']')) {
        if (R->nrecs == R->cap_recs &&
            grow((void **)&R->recs, &R->cap_recs, R->nrecs + 1, sizeof *R->recs) < 0)
            return ERROR;
        Choice *rec = &R->recs[R->nrecs++]; /* owned by the reader from here: see clear_recs */
        memset(rec, 0, sizeof *rec);
        rec->lp_start = rec->ids_start = -1;
        if ((rc = parse_choice(P, rec)))
            return rc;
    }
    return more < 0 ? DECLINE : OK;
}

enum { T_ID = 1, T_OBJECT = 2, T_CREATED = 4, T_MODEL = 8, T_FINGERPRINT = 16,
       T_PROMPT_IDS = 32, T_CHOICES = 64, T_USAGE = 128, T_ERROR = 256 };

/* The event's payload, whole: its values into P and the reader, the edits of the
 * agent's copy into P. */
static int
parse_event(Parser *P)
{
    Reader *R = P->R;
    const uchar *s, *key, *vend, *kept_end = NULL;
    Py_ssize_t n, start;
    int rc, seen = 0, more, k;
    ws(P);
    if (*P->p != '{')
        return DECLINE;
    for (more = open_object(P); more > 0; more = after_member(P)) {
        key = P->p;
        switch (FIRST) {
        case 'i':
            k = KEY("id") ? T_ID : 0;
            break;
        case 'o':
            k = KEY("object") ? T_OBJECT : 0;
            break;
        case 'c':
            k = KEY("choices") ? T_CHOICES : KEY("created") ? T_CREATED : 0;
            break;
        case 'm':
            k = KEY("model") ? T_MODEL : 0;
            break;
        case 's':
            k = KEY("system_fingerprint") ? T_FINGERPRINT : 0;
            break;
        case 'p':
            k = KEY("prompt_token_ids") ? T_PROMPT_IDS : 0;
            break;
        case 'u':
            k = KEY("usage") ? T_USAGE : 0;
            break;
        case 'e':
            k = KEY("error") ? T_ERROR : 0;
            break;
        default:
            k = 0;
        }
        if (!k) {
            if ((rc = read_key(P, &s, &n)))
                return rc;
            if (IS("id") || IS("object") || IS("created") || IS("model") || IS("choices") ||
                IS("system_fingerprint") || IS("prompt_token_ids") || IS("usage") ||
                IS("error"))
                return DECLINE;
        }
        if (seen & k)
            return DECLINE;
        seen |= k;
        switch (k) {
        case T_ID: /* id, model, created: kept for the first event only (an empty top) */
            rc = P->top_empty ? str_or_null(P, &P->id) : check_str_or_null(P);
            break;
        case T_OBJECT: /* checked, not kept */
            rc = check_str_or_null(P);
            break;
        case T_CREATED:
            rc = is_null(P);
            if (rc) {
                rc = rc > 0 ? OK : DECLINE;
            }
            else {
                int64_t i;
                rc = scan_int(P, &i);
                if (!rc && P->top_empty && (P->created = PyLong_FromLongLong(i)) == NULL)
                    rc = ERROR;
            }
            break;
        case T_MODEL:
            rc = P->top_empty ? str_or_null(P, &P->model) : check_str_or_null(P);
            break;
        case T_FINGERPRINT:
            rc = str_or_null(P, &P->fingerprint);
            break;
        case T_PROMPT_IDS:
            rc = is_null(P);
            if (rc) {
                rc = rc > 0 ? OK : DECLINE;
            }
            else if (!(rc = scan_ints(P, &start))) {
                P->prompt_ids = int_list(R->ids + start, R->nids - start);
                R->nids = start;
                if (P->prompt_ids == NULL)
                    rc = ERROR;
            }
            break;
        case T_CHOICES:
            rc = parse_choices(P);
            break;
        case T_USAGE: /* an object, or null (which changes nothing) */
            rc = is_null(P);
            if (rc)
                rc = rc > 0 ? OK : DECLINE;
            else
                rc = *P->p == '{' ? make_any(P, 1, &P->usage) : DECLINE;
            break;
        case T_ERROR:
            rc = DECLINE;
            break;
        default:
            rc = R->strict ? DECLINE : skip_value(P, 1);
        }
        if (rc)
            return rc;
        vend = P->p;
        ws(P);
        if (k == T_PROMPT_IDS && R->strip_ids) {
            if ((rc = cut_member(P, kept_end, key, vend)))
                return rc;
        }
        else {
            kept_end = vend;
        }
    }
    if (more < 0)
        return DECLINE;
    ws(P);
    return P->p == P->end ? OK : DECLINE;
}

/* ------------------------------------------------------------------ the assembler's state */

/* The assembler's objects one read changes, fetched when it first needs them. */
typedef struct {
    PyObject *top;     /* asm.top */
    PyObject *choices; /* asm.choices */
} State;

/* What add_typed does with the event's top-level fields, at once (its choices wait). */
static int
apply_top(Reader *R, State *st, Parser *P)
{
    if (P->top_empty) { /* the first event's id, model and created, when not null */
        PyObject *fresh = PyDict_New();
        if (fresh == NULL)
            return -1;
        if ((P->id && PyDict_SetItem(fresh, s_id, P->id) < 0) ||
            (P->model && PyDict_SetItem(fresh, s_model, P->model) < 0) ||
            (P->created && PyDict_SetItem(fresh, s_created, P->created) < 0) ||
            PyObject_SetAttr(R->asm_, s_top, fresh) < 0) {
            Py_DECREF(fresh);
            return -1;
        }
        Py_SETREF(st->top, fresh);
    }
    if (P->usage && PyDict_CheckExact(P->usage) && PyObject_SetAttr(R->asm_, s_usage, P->usage) < 0)
        return -1;
    if (P->prompt_ids && PyObject_SetAttr(R->asm_, s_prompt_token_ids, P->prompt_ids) < 0)
        return -1;
    if (P->fingerprint && PyObject_SetItem(st->top, s_system_fingerprint, P->fingerprint) < 0)
        return -1;
    return 0;
}

/* `ch.name` (a list, or None) extended by `items` (a new list), as `+=` does; None
 * becomes `items` itself (`= []; += items`: a list of its own), or with `cls` (a list
 * subclass keeping list's `+=`), `cls(items)` (`= cls(); += items`). */
static int
extend_attr(PyObject *ch, PyObject *name, PyObject *items, PyObject *cls)
{
    PyObject *cur = PyObject_GetAttr(ch, name);
    if (cur == NULL)
        return -1;
    int rc;
    if (cur == Py_None) {
        PyObject *fresh = cls == NULL ? Py_NewRef(items) : PyObject_CallOneArg(cls, items);
        rc = fresh == NULL ? -1 : PyObject_SetAttr(ch, name, fresh);
        Py_XDECREF(fresh);
    }
    else if (PyList_CheckExact(cur) || (cls != NULL && Py_IS_TYPE(cur, (PyTypeObject *)cls))) {
        Py_ssize_t n = PyList_GET_SIZE(cur);
        rc = PyList_SetSlice(cur, n, n, items);
    }
    else {
        PyObject *sum = PyNumber_InPlaceAdd(cur, items);
        rc = sum == NULL ? -1 : PyObject_SetAttr(ch, name, sum);
        Py_XDECREF(sum);
    }
    Py_DECREF(cur);
    return rc;
}

/* The log-probs of this read's choices of one index, as add_typed makes them: each
 * entry's value (the number object itself, or None), no object for the entry. */
static PyObject *
logprob_values(Reader *R, Py_ssize_t first, int64_t index, Py_ssize_t count)
{
    PyObject *list = PyList_New(count);
    if (list == NULL)
        return NULL;
    Py_ssize_t k = 0;
    for (Py_ssize_t j = first; j < R->nrecs; j++) {
        Choice *c = &R->recs[j];
        if (c->index != index || c->lp_start < 0)
            continue;
        for (Py_ssize_t e = c->lp_start; e < c->lp_end; e++) {
            Value *v = &R->lps[e];
            PyObject *x = v->kind == V_INT     ? PyLong_FromLongLong(v->i)
                          : v->kind == V_FLOAT ? PyFloat_FromDouble(v->d)
                                               : Py_NewRef(Py_None);
            if (x == NULL) {
                Py_DECREF(list);
                return NULL;
            }
            PyList_SET_ITEM(list, k++, x);
        }
    }
    return list;
}

static PyObject *
token_ids(Reader *R, Py_ssize_t first, int64_t index, Py_ssize_t count)
{
    PyObject *list = PyList_New(count);
    if (list == NULL)
        return NULL;
    Py_ssize_t k = 0;
    for (Py_ssize_t j = first; j < R->nrecs; j++) {
        Choice *c = &R->recs[j];
        if (c->index != index || c->ids_start < 0)
            continue;
        for (Py_ssize_t e = c->ids_start; e < c->ids_end; e++) {
            PyObject *x = PyLong_FromLongLong(R->ids[e]);
            if (x == NULL) {
                Py_DECREF(list);
                return NULL;
            }
            PyList_SET_ITEM(list, k++, x);
        }
    }
    return list;
}

/* The waiting choices of index recs[first].index into the assembler's _Choice of it. */
static int
flush_choice(Reader *R, PyObject *choices, Py_ssize_t first)
{
    int64_t index = R->recs[first].index;
    PyObject *key = PyLong_FromLongLong(index), *ch, *pieces = NULL, *list;
    PyObject *role = NULL, *finish = NULL, *stop = NULL;
    Py_ssize_t nlps = 0, nids = 0;
    int has_lps = 0, has_ids = 0, rc = 0;
    if (key == NULL)
        return -1;
    ch = PyDict_GetItemWithError(choices, key);
    if (ch != NULL) {
        Py_INCREF(ch);
    }
    else if (!PyErr_Occurred() && (ch = PyObject_CallOneArg(R->choice_cls, key)) != NULL &&
             PyDict_SetItem(choices, key, ch) < 0) {
        Py_CLEAR(ch);
    }
    Py_DECREF(key);
    if (ch == NULL)
        return -1;
    for (Py_ssize_t j = first; j < R->nrecs && !rc; j++) {
        Choice *c = &R->recs[j];
        if (c->index != index)
            continue;
        c->done = 1;
        if (c->content) {
            if (pieces == NULL && (pieces = PyObject_GetAttr(ch, s_content)) == NULL) {
                rc = -1;
            }
            else if (PyList_CheckExact(pieces)) {
                rc = PyList_Append(pieces, c->content);
            }
            else {
                PyObject *r = PyObject_CallMethodOneArg(pieces, s_append, c->content);
                rc = r == NULL ? -1 : 0;
                Py_XDECREF(r);
            }
        }
        if (c->role && PyUnicode_GET_LENGTH(c->role))
            role = c->role;
        if (c->lp_start >= 0) {
            has_lps = 1;
            nlps += c->lp_end - c->lp_start;
        }
        if (c->ids_start >= 0) {
            has_ids = 1;
            nids += c->ids_end - c->ids_start;
        }
        if (c->finish_reason)
            finish = c->finish_reason;
        if (c->stop_reason)
            stop = c->stop_reason;
    }
    if (!rc && pieces != NULL)
        rc = PyObject_SetAttr(ch, s_saw_content, Py_True);
    Py_XDECREF(pieces);
    if (!rc && role != NULL)
        rc = PyObject_SetAttr(ch, s_role, role);
    if (!rc && has_lps) {
        list = logprob_values(R, first, index, nlps);
        rc = list == NULL ? -1 : extend_attr(ch, s_logprobs, list, R->values_cls);
        Py_XDECREF(list);
    }
    if (!rc && has_ids) {
        list = token_ids(R, first, index, nids);
        rc = list == NULL ? -1 : extend_attr(ch, s_token_ids, list, NULL);
        Py_XDECREF(list);
    }
    if (!rc && finish != NULL)
        rc = PyObject_SetAttr(ch, s_finish_reason, finish);
    if (!rc && stop != NULL)
        rc = PyObject_SetAttr(ch, s_stop_reason, stop);
    Py_DECREF(ch);
    return rc;
}

/* The waiting choices into the assembler, index by index in the order they first came. */
static int
flush(Reader *R, State *st)
{
    int rc = 0;
    if (!R->nrecs)
        return 0;
    if (st->choices == NULL) {
        if ((st->choices = PyObject_GetAttr(R->asm_, s_choices)) == NULL)
            rc = -1;
        else if (!PyDict_Check(st->choices)) {
            PyErr_SetString(PyExc_TypeError, "the assembler's choices are not a dict");
            rc = -1;
        }
    }
    for (Py_ssize_t j = 0; j < R->nrecs && !rc; j++)
        if (!R->recs[j].done)
            rc = flush_choice(R, st->choices, j);
    clear_recs(R, 0);
    R->nlps = R->nids = 0;
    return rc;
}

/* ------------------------------------------------------------------ the agent's bytes */

typedef struct {
    PyObject *bytes;
    Py_ssize_t used, cap;
} Out;

static int
out_reserve(Out *o, Py_ssize_t more, PyObject *events, Py_ssize_t from)
{
    if (o->bytes == NULL) { /* sized for the rest of the read as it came */
        Py_ssize_t cap = 0, n = PyList_GET_SIZE(events);
        for (Py_ssize_t i = from; i < n; i++) {
            PyObject *ev = PyList_GET_ITEM(events, i);
            if (PyBytes_CheckExact(ev))
                cap += PyBytes_GET_SIZE(ev) + 2;
        }
        if (cap < more)
            cap = more;
        o->bytes = PyBytes_FromStringAndSize(NULL, cap);
        if (o->bytes == NULL)
            return -1;
        o->cap = cap;
        return 0;
    }
    if (o->used + more <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap * 2 > o->used + more ? o->cap * 2 : o->used + more;
    if (_PyBytes_Resize(&o->bytes, cap) < 0)
        return -1; /* o->bytes is NULL */
    o->cap = cap;
    return 0;
}

static inline void
out_put(Out *o, const void *s, Py_ssize_t n)
{
    memcpy(PyBytes_AS_STRING(o->bytes) + o->used, s, n);
    o->used += n;
}

/* The event for the agent: as it came, or with P's edits made; then its blank line. */
static int
out_event(Out *o, PyObject *events, Py_ssize_t i, const uchar *ev, Py_ssize_t len, Parser *P)
{
    if (out_reserve(o, len + 2 + 4 * P->nedits, events, i) < 0)
        return -1;
    if (!P->nedits) {
        out_put(o, ev, len);
    }
    else {
        const uchar *base = P->base;
        Py_ssize_t at = 0;
        out_put(o, ev, base - ev); /* "data: " */
        for (int k = 0; k < P->nedits; k++) {
            Edit *e = &P->edits[k];
            out_put(o, base + at, e->start - at);
            if (e->null)
                out_put(o, "null", 4);
            at = e->stop;
        }
        out_put(o, base + at, (P->end - base) - at);
    }
    out_put(o, "\n\n", 2);
    return 0;
}

/* ------------------------------------------------------------------ Reader */

static int
Reader_traverse(Reader *self, visitproc visit, void *arg)
{
    Py_VISIT(self->asm_);
    Py_VISIT(self->choice_cls);
    Py_VISIT(self->values_cls);
    return 0;
}

static int
Reader_clear(Reader *self)
{
    Py_CLEAR(self->asm_);
    Py_CLEAR(self->choice_cls);
    Py_CLEAR(self->values_cls);
    return 0;
}

static void
Reader_dealloc(Reader *self)
{
    PyObject_GC_UnTrack(self);
    Reader_clear(self);
    clear_recs(self, 0);
    PyMem_Free(self->recs);
    PyMem_Free(self->lps);
    PyMem_Free(self->ids);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Reader_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"asm", "choice_cls", "values_cls", "strict", "strip_ids",
                             "null_logprobs", "max_payload", NULL};
    PyObject *asm_, *choice_cls, *values_cls;
    int strict, strip_ids, null_logprobs;
    Py_ssize_t max_payload;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!pppn:Reader", kwlist, &asm_, &choice_cls,
                                     &PyType_Type, &values_cls, &strict, &strip_ids,
                                     &null_logprobs, &max_payload))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)values_cls, &PyList_Type)) {
        PyErr_SetString(PyExc_TypeError, "values_cls must be a list type");
        return NULL;
    }
    Reader *self = (Reader *)type->tp_alloc(type, 0); /* zeroed */
    if (self == NULL)
        return NULL;
    self->asm_ = Py_NewRef(asm_);
    self->choice_cls = Py_NewRef(choice_cls);
    self->values_cls = Py_NewRef(values_cls);
    self->strict = strict;
    self->strip_ids = strip_ids;
    self->null_logprobs = null_logprobs;
    self->max_payload = max_payload;
    return (PyObject *)self;
}

static int
add_chunks(Reader *R, Py_ssize_t taken)
{
    PyObject *n = PyObject_GetAttr(R->asm_, s_chunks), *k, *sum = NULL;
    if (n == NULL)
        return -1;
    if ((k = PyLong_FromSsize_t(taken)) != NULL)
        sum = PyNumber_Add(n, k);
    Py_XDECREF(k);
    Py_DECREF(n);
    int rc = sum == NULL ? -1 : PyObject_SetAttr(R->asm_, s_chunks, sum);
    Py_XDECREF(sum);
    return rc;
}

static PyObject *
Reader_read(Reader *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_Check(args[0]) || !PyLong_Check(args[1]) ||
        !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "read(events: list, start: int, parts: list)");
        return NULL;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Reader.read is not reentrant");
        return NULL;
    }
    PyObject *events = args[0], *parts = args[2], *result = NULL;
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0)
        i = 0;
    self->busy = 1;
    int done = 0, rc = OK;
    Py_ssize_t taken = 0;
    Out out = {NULL, 0, 0};
    State st = {NULL, NULL};
    Parser P;
    memset(&P, 0, offsetof(Parser, edits));
    P.R = self;

    for (; i < PyList_GET_SIZE(events); i++) {
        PyObject *ev = PyList_GET_ITEM(events, i);
        if (!PyBytes_CheckExact(ev))
            break;
        const uchar *e = (const uchar *)PyBytes_AS_STRING(ev);
        Py_ssize_t len = PyBytes_GET_SIZE(ev);
        if (len < 6 || memcmp(e, "data: ", 6))
            break; /* (a newline inside: parse_event declines it) */
        if (len == 12 && !memcmp(e + 6, "[DONE]", 6)) {
            done = 1; /* released by the pipeline once the step is registered */
            continue;
        }
        if (len - 6 >= self->max_payload)
            break; /* long prompt ids: answer_json keeps them as bytes */
        Py_ssize_t recs = self->nrecs, lps = self->nlps, ids = self->nids;
        Py_INCREF(ev);
        P.base = P.p = e + 6;
        P.end = e + len;
        P.nedits = 0;
        if (st.top == NULL && (st.top = PyObject_GetAttr(self->asm_, s_top)) == NULL) {
            Py_DECREF(ev);
            rc = ERROR;
            break;
        }
        if ((P.top_empty = PyObject_Not(st.top)) < 0) {
            Py_DECREF(ev);
            rc = ERROR;
            break;
        }
        rc = parse_event(&P);
        if (rc == OK &&
            (out_event(&out, events, i, e, len, &P) < 0 || apply_top(self, &st, &P) < 0))
            rc = ERROR;
        parser_clear(&P);
        Py_DECREF(ev);
        if (rc != OK) { /* as if it had not been read */
            clear_recs(self, recs);
            self->nlps = lps;
            self->nids = ids;
            if (rc == DECLINE)
                rc = OK;
            break;
        }
        taken++;
        if (self->nrecs >= FLUSH_RECS && flush(self, &st) < 0) {
            rc = ERROR;
            break;
        }
    }
    /* An error (a MemoryError, an assembler not of the expected shape) fails the call as
     * an exception in the Python path would: what waits is dropped. */
    if (rc == OK && flush(self, &st) < 0)
        rc = ERROR;
    if (rc != OK) {
        clear_recs(self, 0);
        self->nlps = self->nids = 0;
    }
    if (rc == OK && taken && add_chunks(self, taken) < 0)
        rc = ERROR;
    if (rc == OK && out.used) {
        if (out.used < out.cap && _PyBytes_Resize(&out.bytes, out.used) < 0)
            rc = ERROR;
        else if (PyList_Append(parts, out.bytes) < 0)
            rc = ERROR;
    }
    if (rc == OK)
        result = Py_BuildValue("(nO)", i, done ? Py_True : Py_False);
    Py_XDECREF(out.bytes);
    Py_XDECREF(st.top);
    Py_XDECREF(st.choices);
    self->busy = 0;
    return result;
}

static PyMethodDef Reader_methods[] = {
    {"read", (PyCFunction)(void (*)(void))Reader_read, METH_FASTCALL,
     "read(events, start, parts) -> (stop, done)\n\n"
     "Take the events from ``start`` up to the first this reader does not (``stop``:\n"
     "its position, ``len(events)`` when all were taken); append the agent's bytes of\n"
     "those taken to ``parts`` (one bytes), add them to the assembler; ``done``: a\n"
     "``data: [DONE]`` came among them."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "agentworld.proxy._chunks.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Reader(asm, choice_cls, values_cls, strict, strip_ids, null_logprobs,\n"
              "       max_payload)\n\n"
              "The compiled reading of one stream's chat chunk events into ``asm`` (a\n"
              "StreamAssembler; ``choice_cls`` makes its choices, ``values_cls`` (a list\n"
              "type) their ``logprobs``, the entries' values). ``strict``: a field not\n"
              "named sends the event to Python (the REWRITE reading); ``strip_ids``: cut\n"
              "``token_ids`` and ``prompt_token_ids`` from the agent's copy;\n"
              "``null_logprobs``: its ``logprobs`` made null; ``max_payload``: events this\n"
              "long or longer go to Python.",
    .tp_traverse = (traverseproc)Reader_traverse,
    .tp_clear = (inquiry)Reader_clear,
    .tp_methods = Reader_methods,
    .tp_new = Reader_new,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "agentworld.proxy._chunks",
    .m_doc = "Streamed chat chunk events read in C (see agentworld/proxy/_chunks.c).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__chunks(void)
{
    struct {
        PyObject **slot;
        const char *name;
    } names[] = {
        {&s_top, "top"},
        {&s_choices, "choices"},
        {&s_chunks, "chunks"},
        {&s_prompt_token_ids, "prompt_token_ids"},
        {&s_content, "content"},
        {&s_saw_content, "saw_content"},
        {&s_role, "role"},
        {&s_logprobs, "logprobs"},
        {&s_token_ids, "token_ids"},
        {&s_finish_reason, "finish_reason"},
        {&s_stop_reason, "stop_reason"},
        {&s_id, "id"},
        {&s_model, "model"},
        {&s_created, "created"},
        {&s_system_fingerprint, "system_fingerprint"},
        {&s_append, "append"},
        {&s_usage, "usage"},
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        if (*names[k].slot == NULL &&
            (*names[k].slot = PyUnicode_InternFromString(names[k].name)) == NULL)
            return NULL;
    }
    for (int c = 0x20; c < 0x80; c++)
        CLS[c] = c == '"' || c == '\\' ? 0 : B_PLAIN;
    CLS[' '] |= B_WS;
    CLS['\t'] = CLS['\r'] = B_WS;
    if (PyType_Ready(&ReaderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
