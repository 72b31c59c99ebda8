"""The model zoo's models (test_model_zoo.py; dist_worker.py trains one with FSDP2 and
torch.compile): transformers' GPT-2, Llama and BERT from small configs, a Llama-style block, a
small ResNet, an LSTM tagger and a mixture-of-experts layer."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never the Hub

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

VOCAB = 64


class RMSNorm(nn.Module):
    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype) * self.weight


class LlamaStyleBlock(nn.Module):
    """RMSNorm, grouped-query causal SDPA with rotary-free heads, RMSNorm, SiLU-gated MLP."""

    def __init__(self, width=64, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, width // heads
        self.norm1, self.norm2 = RMSNorm(width), RMSNorm(width)
        self.q = nn.Linear(width, width, bias=False)
        self.kv = nn.Linear(width, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(width, width, bias=False)
        self.gate = nn.Linear(width, 2 * width, bias=False)
        self.up = nn.Linear(width, 2 * width, bias=False)
        self.down = nn.Linear(2 * width, width, bias=False)
        self.head = nn.Linear(width, VOCAB, bias=False)
        self.embed = nn.Embedding(VOCAB, width)

    def forward(self, tokens):
        x = self.embed(tokens)
        batch, seq, width = x.shape
        h = self.norm1(x)
        q = self.q(h).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(batch, seq, 2, self.kv_heads, self.head_dim).unbind(2)
        attn = F.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=True, enable_gqa=True)
        x = x + self.o(attn.transpose(1, 2).reshape(batch, seq, width))
        h = self.norm2(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return self.head(x)


class SmallResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                                   nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1, bias=False),
                                   nn.BatchNorm2d(8))
        self.down = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.stem(x)
        x = F.relu(x + self.block(x))
        x = self.down(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class LstmTagger(nn.Module):
    def __init__(self, width=16, classes=5):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.lstm = nn.LSTM(width, width, num_layers=2, batch_first=True)
        self.out = nn.Linear(width, classes)

    def forward(self, tokens):
        return self.out(self.lstm(self.embed(tokens))[0])


class MoELayer(nn.Module):
    """Top-2 routing over four experts: topk, a scatter of the routing weights, index_add of the
    experts' outputs."""

    def __init__(self, width=32, experts=4):
        super().__init__()
        self.router = nn.Linear(width, experts, bias=False)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(),
                                                   nn.Linear(2 * width, width))
                                     for _ in range(experts))
        self.head = nn.Linear(width, VOCAB)
        self.embed = nn.Embedding(VOCAB, width)

    def forward(self, tokens):
        x = self.embed(tokens).flatten(0, 1)
        logits = self.router(x)
        top_weights, top_experts = logits.softmax(-1).topk(2, dim=-1)
        weights = torch.zeros_like(logits).scatter(1, top_experts, top_weights)
        out = torch.zeros_like(x)
        for index, expert in enumerate(self.experts):
            rows = (top_experts == index).any(-1).nonzero().squeeze(-1)
            contribution = expert(x[rows]) * weights[rows, index].unsqueeze(-1)
            out = out.index_add(0, rows, contribution)
        return self.head(out).view(tokens.shape[0], tokens.shape[1], VOCAB)


def transformers_model(name):
    """GPT-2 ("gpt2"), Llama ("llama") or BERT ("bert") from transformers, small, no dropout."""
    import transformers

    transformers.logging.set_verbosity_error()
    if name == "gpt2":
        config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2,
                                         n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                                         attn_pdrop=0.0)
        return transformers.GPT2LMHeadModel(config)
    if name == "llama":
        config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                          num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, max_position_embeddings=32)
        return transformers.LlamaForCausalLM(config)
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=32, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    return transformers.BertForMaskedLM(config)
