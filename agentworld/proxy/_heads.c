/* agentworld.proxy._heads: the two HTTP/1.1 heads of every proxied call, read in C.
 *
 * Each call has two heads to read: the agent's request head (front/http1.py,
 * `parse_head`) and the upstream's response head (upstream/client.py,
 * `parse_response_head`). Read in Python they cost ~38k and ~28k instructions
 * (callgrind, a plain head of each), where the bare aiohttp hop the proxy is
 * measured against reads both in C (llhttp). Each function here is the fast path
 * of its Python function, which stays the definition: it runs wherever this
 * extension is not built or is switched off (AW_NO_EXTENSIONS=1), and
 * tests/proxy/test_fast_heads.py holds the two to the same results on hand-written
 * heads and on a seeded mutation fuzz of them.
 *
 *  - `parse_request(head)` decides exactly as `parse_head_python` does: None where the
 *    front does not serve the head, else `(path, query, pairs, content_length,
 *    keep_alive)`, `pairs` a list of the header lines' (name, value) in order,
 *    out of which `parse_head` makes its CIMultiDict. There is no third verdict:
 *    the rules are few and exact (a POST over HTTP/1.1, an origin-form target,
 *    token names, printable values, one Content-Length, ...), so they are all
 *    here, and the fuzz holds them to the regular expressions of the definition.
 *  - `parse_response(block)` reads the head of an ordinary answer: `(status,
 *    reason, version, pairs)`, `pairs` None for an interim (1xx) answer, whose
 *    header lines are not read. Anything else (a line the definition refuses with
 *    an UpstreamProtocolError, a status that is not three digits) is None, and
 *    the definition reads it again, to accept it or to word the error.
 *
 *  - `chunk_run(data, pos)` reads the usual run of a chunked body, whole chunks one
 *    after another, for upstream/client.py's `_decode_chunks` (below).
 *
 * They raise only what Python would: MemoryError, and TypeError for an argument
 * that is no bytes-like object.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

typedef unsigned char uchar;

/* Byte classes, one bit each (set at import). */
enum {
    C_TOKEN = 1,  /* a header name's (RFC 9110's tchar): "!#$%&'*+-.^_`|~", digits, letters */
    C_VALUE = 2,  /* a request header value's: HTAB and printable ASCII */
    C_TARGET = 4, /* a request path's: printable ASCII and HTAB, less space, '?', '%', '#' */
    C_QUERY = 8,  /* a request query's: letters, digits and "-._~=&" */
    C_SPACE = 16, /* what bytes.split() and bytes.strip() take for whitespace */
};
static uchar CLS[256];

static inline int
lower(uchar c)
{
    return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

/* The `n` bytes at `p` are `name` (lowercase), whatever their case. */
static int
same_name(const uchar *p, Py_ssize_t n, const char *name, Py_ssize_t len)
{
    if (n != len)
        return 0;
    for (Py_ssize_t k = 0; k < n; k++)
        if (lower(p[k]) != (uchar)name[k])
            return 0;
    return 1;
}

#define SAME(p, n, literal) same_name((p), (n), literal, (Py_ssize_t)sizeof(literal) - 1)

/* A str of `n` bytes known to be ASCII: made as such, not decoded. */
static PyObject *
ascii_str(const uchar *p, Py_ssize_t n)
{
    PyObject *s = PyUnicode_New(n, 127);
    if (s != NULL && n)
        memcpy(PyUnicode_DATA(s), p, n);
    return s;
}

/* A (name, value) tuple of two new references, or NULL (and both released). */
static PyObject *
pair(PyObject *name, PyObject *value)
{
    if (name == NULL || value == NULL) {
        Py_XDECREF(name);
        Py_XDECREF(value);
        return NULL;
    }
    PyObject *t = PyTuple_New(2);
    if (t == NULL) {
        Py_DECREF(name);
        Py_DECREF(value);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, name);
    PyTuple_SET_ITEM(t, 1, value);
    return t;
}

/* ------------------------------------------------------------------ the request head */

/* `[*v, *end)` without the spaces and HTABs around it (as _PAIR's groups take a value). */
static void
trim_blanks(const uchar **v, const uchar **end)
{
    while (*v < *end && (**v == ' ' || **v == '\t'))
        (*v)++;
    while (*end > *v && ((*end)[-1] == ' ' || (*end)[-1] == '\t'))
        (*end)--;
}

/* What a Connection value says, as `{t.strip() for t in value.lower().split(",")}` is
 * read: 1 if "upgrade" is among its tokens (the front does not serve it), else 0, and
 * `*close` set if "close" is. Only spaces and HTABs can surround a token in a value the
 * head's shape let through, so they are all `str.strip()` could take. */
static int
connection_upgrades(const uchar *v, const uchar *end, int *close)
{
    for (;;) {
        const uchar *comma = memchr(v, ',', end - v);
        const uchar *t = v, *t_end = comma != NULL ? comma : end;
        trim_blanks(&t, &t_end);
        if (SAME(t, t_end - t, "upgrade"))
            return 1;
        if (SAME(t, t_end - t, "close"))
            *close = 1;
        if (comma == NULL)
            return 0;
        v = comma + 1;
    }
}

static PyObject *
read_request(const uchar *p, Py_ssize_t n)
{
    const uchar *end = p + n, *s;

    /* The request line: "POST ", the path, an optional query, " HTTP/1.1" (_HEAD). */
    if (n < 6 || memcmp(p, "POST /", 6) != 0)
        Py_RETURN_NONE;
    const uchar *path = p + 5;
    s = path + 1;
    while (s < end && (CLS[*s] & C_TARGET))
        s++;
    const uchar *path_end = s, *query = s, *query_end = s;
    if (s < end && *s == '?') {
        query = ++s;
        while (s < end && (CLS[*s] & C_QUERY))
            s++;
        query_end = s;
    }
    if (end - s < 9 || memcmp(s, " HTTP/1.1", 9) != 0)
        Py_RETURN_NONE;
    s += 9;
    for (const uchar *t = path; t + 1 < path_end; t++)
        if (t[0] == '/' && t[1] == '.')
            Py_RETURN_NONE; /* a dot segment */

    /* The header lines, each after its CRLF: a token, a colon, HTAB and printable
     * ASCII up to the next CR or the end; each pair made as its line is read (a head
     * turned down on the way drops them). What the verdict rests on is noted on the way:
     * the names that hand the request off, the Content-Length lines, the first
     * Connection line (the one CIMultiDict.get gives). */
    PyObject *pairs = PyList_New(0), *result = NULL;
    if (pairs == NULL)
        return NULL;
    const uchar *length = NULL, *length_end = NULL, *conn = NULL, *conn_end = NULL;
    Py_ssize_t lengths = 0;
    while (s < end) {
        if (end - s < 2 || s[0] != '\r' || s[1] != '\n')
            goto decline; /* a bare CR, or a CR without its LF */
        const uchar *name = s += 2;
        while (s < end && (CLS[*s] & C_TOKEN))
            s++;
        Py_ssize_t name_len = s - name;
        if (name_len == 0 || s == end || *s != ':')
            goto decline;
        const uchar *value = ++s;
        while (s < end && (CLS[*s] & C_VALUE))
            s++;
        if (s < end && *s != '\r')
            goto decline; /* a control character, a bare LF, a byte past ASCII */
        const uchar *value_end = s;
        trim_blanks(&value, &value_end);
        if (SAME(name, name_len, "transfer-encoding") ||
            SAME(name, name_len, "content-encoding") || SAME(name, name_len, "expect") ||
            SAME(name, name_len, "upgrade"))
            goto decline; /* a body framed otherwise, or not a plain request (_HAND_OFF) */
        if (SAME(name, name_len, "content-length")) {
            lengths++;
            length = value;
            length_end = value_end;
        }
        else if (conn == NULL && SAME(name, name_len, "connection")) {
            conn = value;
            conn_end = value_end;
        }
        PyObject *name_str = ascii_str(name, name_len);
        PyObject *t = pair(name_str, name_str ? ascii_str(value, value_end - value) : NULL);
        if (t == NULL || PyList_Append(pairs, t) < 0) {
            Py_XDECREF(t);
            goto done;
        }
        Py_DECREF(t);
    }
    if (lengths != 1)
        goto decline;
    Py_ssize_t digits = length_end - length;
    if (digits == 0 || digits > 15)
        goto decline;
    long long content_length = 0;
    for (const uchar *d = length; d < length_end; d++) {
        if (*d < '0' || *d > '9')
            goto decline;
        content_length = content_length * 10 + (*d - '0'); /* 15 digits: no overflow */
    }
    int close = 0;
    if (conn != NULL && connection_upgrades(conn, conn_end, &close))
        goto decline;

    /* (Each made only once the one before it was: no call with an error set.) */
    PyObject *path_str = ascii_str(path, path_end - path);
    PyObject *query_str = path_str ? ascii_str(query, query_end - query) : NULL;
    PyObject *length_int = query_str ? PyLong_FromLongLong(content_length) : NULL;
    if (length_int != NULL)
        result = PyTuple_Pack(5, path_str, query_str, pairs, length_int,
                              close ? Py_False : Py_True);
    Py_XDECREF(path_str);
    Py_XDECREF(query_str);
    Py_XDECREF(length_int);
done:
    Py_DECREF(pairs);
    return result;
decline:
    Py_DECREF(pairs);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ the response head */

/* The first CRLF in `[p, end)`, or `end`. */
static const uchar *
find_crlf(const uchar *p, const uchar *end)
{
    while (p < end) {
        const uchar *cr = memchr(p, '\r', end - p);
        if (cr == NULL || cr + 1 == end)
            return end;
        if (cr[1] == '\n')
            return cr;
        p = cr + 1;
    }
    return end;
}

/* No byte of the `n` at `p` past ASCII (a word at a time). */
static int
all_ascii(const uchar *p, Py_ssize_t n)
{
    uint64_t high = 0, word;
    Py_ssize_t k = 0;
    for (; k + 8 <= n; k += 8) {
        memcpy(&word, p + k, 8);
        high |= word;
    }
    for (; k < n; k++)
        high |= p[k];
    return (high & 0x8080808080808080ULL) == 0;
}

static PyObject *
latin1_str(const uchar *p, Py_ssize_t n)
{
    return PyUnicode_DecodeLatin1((const char *)p, n, NULL);
}

/* `[p, end)` as bytes.strip() leaves it, made a str by `make_str`. */
static PyObject *
stripped(PyObject *(*make_str)(const uchar *, Py_ssize_t), const uchar *p, const uchar *end)
{
    while (p < end && (CLS[*p] & C_SPACE))
        p++;
    while (end > p && (CLS[end[-1]] & C_SPACE))
        end--;
    return make_str(p, end - p);
}

static PyObject *
read_response(const uchar *p, Py_ssize_t n)
{
    const uchar *end = p + n;
    const uchar *eol = find_crlf(p, end);

    /* The status line, as `line.split(None, 2)` parts it: the version, the status, and
     * the rest of the line (its trailing whitespace kept) for the reason. A version not
     * "HTTP/..." or a status but three digits is Python's to read (int() takes "+200",
     * "0200", "2_00"; the rest is an error it words). */
    const uchar *s = p;
    while (s < eol && (CLS[*s] & C_SPACE))
        s++;
    const uchar *version = s;
    while (s < eol && !(CLS[*s] & C_SPACE))
        s++;
    const uchar *version_end = s;
    while (s < eol && (CLS[*s] & C_SPACE))
        s++;
    const uchar *code = s;
    while (s < eol && !(CLS[*s] & C_SPACE))
        s++;
    const uchar *code_end = s;
    while (s < eol && (CLS[*s] & C_SPACE))
        s++;
    const uchar *reason = s;
    if (version_end - version < 5 || memcmp(version, "HTTP/", 5) != 0 || code_end - code != 3)
        Py_RETURN_NONE;
    int status = 0;
    for (const uchar *d = code; d < code_end; d++) {
        if (*d < '0' || *d > '9')
            Py_RETURN_NONE;
        status = status * 10 + (*d - '0');
    }

    /* The header lines (none read for an interim answer), each split at its first
     * colon; a line without one is Python's ("bad header line"). The head is decoded
     * latin-1, and nearly always ASCII: then its strings are made as such, not decoded
     * (PyUnicode_DecodeLatin1 costs ~70 instructions a string more: 3,600 of the 22,000
     * that OpenAI's 24-line head takes). */
    PyObject *(*make_str)(const uchar *, Py_ssize_t) = all_ascii(p, n) ? ascii_str : latin1_str;
    PyObject *pairs = NULL, *result = NULL, *status_int = NULL, *reason_str = NULL,
             *version_bytes = NULL;
    if (!(status >= 100 && status < 200)) {
        if ((pairs = PyList_New(0)) == NULL)
            return NULL;
        for (s = eol; s < end;) {
            const uchar *line = s + 2, *line_end = find_crlf(line, end);
            const uchar *colon = memchr(line, ':', line_end - line);
            if (colon == NULL) {
                Py_DECREF(pairs);
                Py_RETURN_NONE;
            }
            PyObject *name = stripped(make_str, line, colon);
            PyObject *t = pair(name, name ? stripped(make_str, colon + 1, line_end) : NULL);
            if (t == NULL || PyList_Append(pairs, t) < 0) {
                Py_XDECREF(t);
                goto done;
            }
            Py_DECREF(t);
            s = line_end;
        }
    }
    status_int = PyLong_FromLong(status);
    if (status_int != NULL)
        reason_str = make_str(reason, eol - reason);
    if (reason_str != NULL)
        version_bytes = PyBytes_FromStringAndSize((const char *)version, version_end - version);
    if (version_bytes != NULL)
        result = PyTuple_Pack(4, status_int, reason_str, version_bytes,
                              pairs != NULL ? pairs : Py_None);
done:
    Py_XDECREF(pairs);
    Py_XDECREF(status_int);
    Py_XDECREF(reason_str);
    Py_XDECREF(version_bytes);
    return result;
}

/* ------------------------------------------------------------------ the module */

/* `read(bytes of arg)`: a bytes object read in place, any other bytes-like through the
 * buffer protocol (the callers pass bytes). */
static PyObject *
with_bytes(PyObject *arg, PyObject *(*read)(const uchar *, Py_ssize_t))
{
    if (PyBytes_Check(arg))
        return read((const uchar *)PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg));
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = read((const uchar *)view.buf, view.len);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *
parse_request(PyObject *module, PyObject *head)
{
    return with_bytes(head, read_request);
}

static PyObject *
parse_response(PyObject *module, PyObject *block)
{
    return with_bytes(block, read_response);
}

/* chunk_run(data, pos) -> (bytes, pos): from `pos`, the data of the whole chunks that
 * follow one another there, each a size line of 1 to 8 hex digits and CRLF (no
 * extensions), its data, and CRLF, joined; and where the run ends (at the first
 * chunk that is not whole, or framed otherwise: the last, zero-size chunk, a size
 * line with an extension, a bad one). The loop of UpstreamResponse._decode_chunks
 * (upstream/client.py) reads on from there as before: this is its usual case, a
 * stream's read of many small chunks, one an event, where the Python loop took a
 * regular expression match and two slices a chunk. */
static PyObject *
chunk_run(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "y*n:chunk_run", &view, &pos))
        return NULL;
    const uchar *data = view.buf;
    Py_ssize_t n = view.len;
    if (pos < 0 || pos > n) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "chunk_run: pos out of range");
        return NULL;
    }
    /* Two passes: find the run and its size, then copy its data into one bytes. */
    Py_ssize_t at = pos, total = 0;
    for (;;) {
        Py_ssize_t i = at;
        uint64_t size = 0;
        while (i < n && i - at < 8) {
            uchar c = data[i];
            int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
            if (d < 0)
                break;
            size = size * 16 + (uint64_t)d;
            i++;
        }
        if (i == at || i + 1 >= n || data[i] != '\r' || data[i + 1] != '\n' || size == 0)
            break;
        Py_ssize_t start = i + 2;
        if ((uint64_t)(n - start) < size + 2)
            break; /* not all here yet */
        Py_ssize_t stop = start + (Py_ssize_t)size;
        if (data[stop] != '\r' || data[stop + 1] != '\n')
            break;
        total += (Py_ssize_t)size;
        at = stop + 2;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    char *w = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = pos; i < at;) {
        uint64_t size = 0;
        while (data[i] != '\r') {
            uchar c = data[i++];
            size = size * 16 + (uint64_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
        }
        memcpy(w, data + i + 2, (size_t)size);
        w += size;
        i += 2 + (Py_ssize_t)size + 2;
    }
    PyBuffer_Release(&view);
    PyObject *got = Py_BuildValue("(Nn)", out, at);
    return got;
}

static PyMethodDef methods[] = {
    {"parse_request", parse_request, METH_O,
     "parse_request(head) -> (path, query, pairs, content_length, keep_alive) | None\n\n"
     "The request head (its bytes up to the blank line) as front/http1.py's parse_head\n"
     "reads it: None where the front does not serve it, else its fields, ``pairs`` the\n"
     "header lines' (name, value) in order, each value without its spaces and tabs."},
    {"parse_response", parse_response, METH_O,
     "parse_response(block) -> (status, reason, version, pairs) | None\n\n"
     "An ordinary response head (its bytes up to the blank line) as upstream/client.py's\n"
     "parse_response_head reads it, ``pairs`` None for an interim (1xx) answer; None for\n"
     "anything else, which that function reads."},
    {"chunk_run", chunk_run, METH_VARARGS,
     "chunk_run(data, pos) -> (bytes, pos)\n\n"
     "The data of the whole chunks (a bare 1-8 hex digit size line, the data, CRLF) that\n"
     "follow one another from ``pos``, joined, and where that run ends."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "agentworld.proxy._heads",
    .m_doc = "The proxy's HTTP/1.1 heads read in C (see agentworld/proxy/_heads.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__heads(void)
{
    for (int c = 0; c < 256; c++) {
        int cls = 0;
        if ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))
            cls |= C_TOKEN | C_QUERY;
        else if (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL)
            cls |= C_TOKEN;
        if (c != 0 && strchr("-._~=&", c) != NULL)
            cls |= C_QUERY;
        if (c == '\t' || (c >= 0x20 && c <= 0x7e))
            cls |= C_VALUE;
        if ((cls & C_VALUE) && c != ' ' && c != '?' && c != '%' && c != '#')
            cls |= C_TARGET;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f')
            cls |= C_SPACE;
        CLS[c] = (uchar)cls;
    }
    return PyModule_Create(&module);
}
